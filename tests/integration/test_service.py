# SPDX-License-Identifier: MIT
"""test_service.py - semad under a service manager: systemd's readiness protocol (READY=1 once
it serves, RELOADING=1 and READY=1 around SIGHUP, STOPPING=1 at SIGTERM, WATCHDOG=1 at half
the interval asked for), heard on a real Unix datagram socket as systemd would listen."""
import os
import re
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402


class Manager:
    """The service manager's end: a datagram socket named by NOTIFY_SOCKET."""

    def __init__(self, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "sema-notify-%d-%d" % (os.getpid(), time.monotonic_ns())
            self.sock.bind("\0" + name)
            self.env = "@" + name
        else:
            self.env = os.path.join(fx.temp_dir("sema-notify-"), "notify")
            self.sock.bind(self.env)

    def next(self, timeout=10):
        """The next message, as a dict of its NAME=VALUE lines."""
        self.sock.settimeout(timeout * fx.SLOW)
        data = self.sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in data.split("\n") if line)

    def until(self, key, timeout=10):
        """Messages up to the first that has `key`, which is returned; the others too."""
        seen = []
        deadline = time.monotonic() + timeout * fx.SLOW
        while True:
            m = self.next(max(0.01, deadline - time.monotonic()))
            seen.append(m)
            if key in m:
                return m, seen

    def close(self):
        self.sock.close()


def test_readiness_reload_and_stop_are_told_to_the_service_manager():
    for abstract in (False, True):
        m = Manager(abstract)
        try:
            with fx.Semad(env={"NOTIFY_SOCKET": m.env}) as s:
                ready = m.next()
                assert ready.get("READY") == "1", ready
                assert re.match(r"semad \S+ ready \(durability none", ready["STATUS"]), ready
                # READY comes once the port answers: semad serves by then.
                assert s.request("GET", "/healthz")[0] == 200
                s.proc.send_signal(signal.SIGHUP)
                reload = m.next()
                assert reload.get("RELOADING") == "1", reload
                assert int(reload["MONOTONIC_USEC"]) > 0, reload
                assert m.next() == {"READY": "1"}
                s.proc.send_signal(signal.SIGTERM)
                assert m.next() == {"STOPPING": "1"}
                assert s.wait_exit() == 0
        finally:
            m.close()


def test_watchdog_keepalives_come_at_half_the_interval():
    m = Manager()
    try:
        # 200 ms asked: a keep-alive every 100 ms while the loop runs.
        with fx.Semad(env={"NOTIFY_SOCKET": m.env, "WATCHDOG_USEC": "200000"}):
            assert m.next().get("READY") == "1"
            t0 = time.monotonic()
            for _ in range(5):
                assert m.next() == {"WATCHDOG": "1"}
            # five at 100 ms apart: at least 0.4 s (the upper bound is the machine's)
            assert time.monotonic() - t0 >= 0.35, time.monotonic() - t0
        m.sock.settimeout(0)
        while True:  # the last keep-alives and STOPPING=1, then nothing more
            try:
                m.sock.recv(4096)
            except BlockingIOError:
                break
    finally:
        m.close()


def test_a_watchdog_meant_for_another_process_is_not_kept():
    m = Manager()
    try:
        # WATCHDOG_PID names another process (pid 1): the interval is not semad's to keep.
        with fx.Semad(env={"NOTIFY_SOCKET": m.env, "WATCHDOG_USEC": "20000",
                           "WATCHDOG_PID": "1"}) as s:
            assert m.next().get("READY") == "1"
            # kept, it would send one every 10 ms: none in 0.3 s
            try:
                got = m.next(timeout=0.3 / fx.SLOW)
            except socket.timeout:
                got = None
            assert got is None, got
            s.proc.send_signal(signal.SIGTERM)
            assert m.next() == {"STOPPING": "1"}
            assert s.wait_exit() == 0
    finally:
        m.close()


def test_without_a_service_manager_nothing_changes():
    # No NOTIFY_SOCKET: nothing is sent. A bad one (not a path): semad serves and says why
    # the manager is not told.
    with fx.Semad() as s:
        assert s.request("GET", "/healthz")[0] == 200
    with fx.Semad(env={"NOTIFY_SOCKET": "relative/notify"}) as s:
        assert s.request("GET", "/healthz")[0] == 200
        fx.wait_until(lambda: any("NOTIFY_SOCKET=relative/notify: not a Unix socket path" in l
                                  for l in s.log()), what="the warning")


if __name__ == "__main__":
    fx.main(globals())
