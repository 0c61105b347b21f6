# SPDX-License-Identifier: MIT
"""test_streams.py - event streams whose clients do not read cost bounded memory: each event
is rendered once and shared, a stream that holds too much is cut, all streams together are
capped (the slowest cut first), and the memory goes back once they are gone. Readers that
keep up get every event in order meanwhile."""
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402

SANITIZED = os.environ.get("SEMA_SANITIZE", "") != ""
MIB = 1 << 20


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def subscribe(s, name, rcvbuf=None):
    """A raw event-stream request; the client reads nothing unless asked."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30 * fx.SLOW)
    sock.connect((s.host, s.port))
    sock.sendall(("GET /v1/semaphores/%s/events HTTP/1.1\r\nHost: t\r\n\r\n" % name).encode())
    return sock


class Reader(threading.Thread):
    """Reads a stream as fast as it comes: the ids of the events it saw, in order."""

    def __init__(self, s, name):
        super().__init__(daemon=True)
        self.sock = subscribe(s, name)
        self.ids = []
        self.error = None

    def run(self):
        f = self.sock.makefile("rb")
        try:
            for line in f:
                if line.startswith(b"id: "):
                    self.ids.append(line[4:].strip().decode())
        except OSError as e:  # closed by the test
            self.error = e

    def wait_for(self, n, timeout):
        end = time.monotonic() + timeout
        while len(self.ids) < n and time.monotonic() < end:
            time.sleep(0.05)
        return len(self.ids)


def raise_fd_limit(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= n


def drive_pairs(s, name, pairs):
    """acquire+release pairs on `name` with the project's load generator: 2 events each."""
    sema = os.environ.get("SEMA_BIN") or os.path.join(fx.source_dir(), "build", "bin", "sema")
    p = subprocess.run([sema, "bench", "-s", s.url(""), "-m", "pairs", "-n", str(pairs), "-c", "8",
                        "--name", name, "--no-create", "-k", "1", "--json"],
                       capture_output=True, text=True, timeout=300 * fx.SLOW)
    assert p.returncode == 0, (p.stdout, p.stderr)


@fx.not_through_proxy("event streams")
def test_non_reading_streams_stay_bounded_and_memory_comes_back():
    """1,000 streams that never read and 30k events: semad grows by less than 100 MB, readers
    that keep up see every event in order, and after the streams close semad comes back to
    within 20 MB of its idle size."""
    nstreams = 1000 if not SANITIZED else 200
    pairs = 15000 if not SANITIZED else 3000
    if not raise_fd_limit(nstreams + 200):
        raise fx.Skip("cannot open %d descriptors here" % (nstreams + 200))
    with fx.Semad() as s:
        name = "dos-0"
        assert s.json("PUT", "/v1/semaphores/" + name, {"capacity": 100})[0] == 201
        drive_pairs(s, name, 500)  # warm up: allocator arenas, buffers
        idle = rss_kib(s.proc.pid)
        readers = [Reader(s, name) for _ in range(3)]
        for r in readers:
            r.start()
        silent = [subscribe(s, name, rcvbuf=4096) for _ in range(nstreams)]
        fx.wait_until(lambda: fx.metric(s, "semad_event_streams") == nstreams + 3,
                      timeout=30 * fx.SLOW, what="every stream subscribed")
        peak = [idle]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss_kib(s.proc.pid))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        # In chunks, each read by the readers before the next: readers that keep up see every
        # event, however busy the machine (one that falls 1 MiB behind is cut, as it should be)
        chunk, events = 500, 0
        for _ in range(pairs // chunk):
            drive_pairs(s, name, chunk)
            events += 2 * chunk
            for r in readers:
                assert r.wait_for(events, 60 * fx.SLOW) == events, (len(r.ids), events)
        done.set()
        sampler.join()
        grew = (peak[0] - idle) * 1024
        print("idle %d KiB, peak %d KiB (+%.1f MiB) with %d silent streams, %d events; %s cut"
              % (idle, peak[0], grew / MIB, nstreams, events,
                 fx.metric(s, "semad_event_streams_cut_total")))
        for r in readers:
            seqs = [int(i.split("-")[1]) for i in r.ids]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "gap or reorder"
        if not SANITIZED:  # ASan's shadow memory and quarantine are not semad's
            assert grew < 100 * MIB, "semad grew %.1f MiB" % (grew / MIB)
        for sock in silent:
            sock.close()
        for r in readers:
            r.sock.shutdown(socket.SHUT_RDWR)
            r.sock.close()
        fx.wait_until(lambda: fx.metric(s, "semad_event_streams") == 0, timeout=30 * fx.SLOW,
                      what="every stream closed")
        assert fx.metric(s, "semad_event_stream_buffer_bytes") < 64 * 1024
        if not SANITIZED:
            fx.wait_until(lambda: rss_kib(s.proc.pid) - idle < 20 * 1024, timeout=10,
                          what="memory back within 20 MB of idle (now %d KiB, idle %d KiB)"
                          % (rss_kib(s.proc.pid), idle))


@fx.not_through_proxy("event streams")
def test_all_streams_together_are_capped_slowest_first():
    """With --max-stream-buffer-bytes small, silent streams are cut (counted, and logged as a
    summary, not a line each) while a reader that keeps up stays subscribed."""
    with fx.Semad("--max-stream-buffer-bytes", str(2 * MIB), "--max-stream-bytes",
                  str(1 * MIB)) as s:
        name = "cap-0"
        assert s.json("PUT", "/v1/semaphores/" + name, {"capacity": 10})[0] == 201
        reader = Reader(s, name)
        reader.start()
        silent = [subscribe(s, name, rcvbuf=4096) for _ in range(50)]
        fx.wait_until(lambda: fx.metric(s, "semad_event_streams") == 51, timeout=30 * fx.SLOW,
                      what="every stream subscribed")
        drive_pairs(s, name, 8000)
        assert reader.wait_for(16000, 60 * fx.SLOW) == 16000
        cut = fx.metric(s, "semad_event_streams_cut_total")
        assert cut >= 1, cut
        assert fx.metric(s, "semad_event_stream_buffer_bytes") <= 2 * MIB + 64 * 1024
        lines = [ln for ln in s.log() if "event stream(s) whose clients do not read" in ln]
        # cuts are summarised: at least one line, and fewer lines than cuts when there were many
        assert len(lines) >= 1 and (len(lines) < cut or cut == 1), (len(lines), cut)
        for sock in silent:
            sock.close()
        reader.sock.close()


@fx.not_through_proxy("event streams")
def test_streams_whose_clients_leave_are_not_counted_as_cut():
    """A client that closes its stream while events flow left; it did not fail to read: it is
    not counted in semad_event_streams_cut_total nor logged as a stream that does not read,
    even when a write to it was under way as it closed."""
    with fx.Semad() as s:
        name = "leave-0"
        assert s.json("PUT", "/v1/semaphores/" + name, {"capacity": 10})[0] == 201
        sema = os.environ.get("SEMA_BIN") or os.path.join(fx.source_dir(), "build", "bin",
                                                          "sema")
        load = subprocess.Popen([sema, "bench", "-s", s.url(""), "-c", "8", "-d", "10m",
                                 "--name", name, "--no-create"], stdout=subprocess.DEVNULL)
        fx.wait_until(lambda: (fx.metric(s, "semad_grants_total") or 0) > 0, timeout=10,
                      what="events flowing")
        for _ in range(60):
            sock = subscribe(s, name)
            f = sock.makefile("rb")
            seen = 0
            while seen < 20:  # reading, as a client that keeps up does
                seen += f.readline().startswith(b"id: ")
            f.close()
            sock.close()
        fx.wait_until(lambda: fx.metric(s, "semad_event_streams") == 0, timeout=10,
                      what="every stream gone")
        assert fx.metric(s, "semad_event_streams_cut_total") == 0
        assert not [ln for ln in s.log() if "whose clients do not read" in ln], s.log()
        load.send_signal(signal.SIGINT)  # it stops issuing and releases what it holds
        assert load.wait(30 * fx.SLOW) == 0


if __name__ == "__main__":
    fx.main(globals())
