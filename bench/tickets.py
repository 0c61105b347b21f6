#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tickets.py - what tickets cost semad, and how good their estimate is.

  bench/tickets.py BUILD scale [N] [SECONDS]    (defaults: 100000 tickets, 10 s)
  bench/tickets.py BUILD estimate [SECONDS]     (default: 60 s)

scale: resident memory per waiting ticket (N tickets in one line) beside a parked long-poll
acquire (N/10 of them, connections included), then semad's CPU per second while the line
holds about N tickets and moves at 1,000 grants/s (capacity 1,000, leases of 1 s ending by
expiry, 1,000 new tickets/s keeping the line long) beside the same flow with no line.

SEMAD_ENGINE=redis://HOST:PORT: on semad's Redis back end instead (that Redis is emptied).

estimate: flash crowds of tickets (20 every 2 s) on a semaphore of capacity 4 whose hold
times vary by phase (uniform, log-normal, a mix of short and long); each hold is the lease's
ttl, so leases end by expiry. For every ticket that had to wait and got an estimate, the
error |estimate p50 - actual wait| / actual wait, and whether the wait was within p90; beside
a static estimate (position x the mean hold of the whole run / capacity) computed by this
script from the true hold times. Prints `figure ...` lines."""
import json
import os
import random
import resource
import socket
import subprocess
import sys
import threading
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build"
mode = sys.argv[2] if len(sys.argv) > 2 else "scale"
SEED = 20261125


def start(*args):
    # SEMAD_ENGINE=redis://HOST:PORT runs the same on semad's Redis back end (a Redis of the
    # caller's, emptied first)
    engine = os.environ.get("SEMAD_ENGINE")
    if engine:
        hp = engine.split("//", 1)[1].split("/", 1)[0]
        subprocess.run(["redis-cli", "-h", hp.rsplit(":", 1)[0], "-p", hp.rsplit(":", 1)[1],
                        "FLUSHALL"], capture_output=True, timeout=30)
        args = ("--engine", engine) + args
    srv = subprocess.Popen([os.path.join(build, "bin", "semad"), "--listen", "127.0.0.1:0",
                            "--durability", "relaxed" if engine else "none"] + list(args),
                           stderr=subprocess.PIPE, text=True)
    line = srv.stderr.readline()
    while "listening on" not in line:
        line = srv.stderr.readline()
    host, port = line.rsplit("http://", 1)[1].strip().rsplit(":", 1)
    threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
    return srv, host, int(port)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Conn:
    """One keep-alive connection with pipelined requests."""

    def __init__(self, host, port):
        self.s = socket.create_connection((host, port))
        self.f = self.s.makefile("rb")

    def send(self, method, path, body=None):
        b = json.dumps(body).encode() if body is not None else b""
        self.s.sendall(("%s %s HTTP/1.1\r\nHost: b\r\nContent-Length: %d\r\n\r\n" %
                        (method, path, len(b))).encode() + b)

    def reply(self):
        status = int(self.f.readline().split()[1])
        n = 0
        while True:
            h = self.f.readline()
            if h in (b"\r\n", b""):
                break
            k, _, v = h.decode().partition(":")
            if k.lower() == "content-length":
                n = int(v)
        return status, (json.loads(self.f.read(n)) if n else None)

    def call(self, method, path, body=None):
        self.send(method, path, body)
        return self.reply()

    def pipeline(self, reqs, batch=500):
        out = []
        for i in range(0, len(reqs), batch):
            chunk = reqs[i:i + batch]
            self.s.sendall(b"".join(
                ("%s %s HTTP/1.1\r\nHost: b\r\nContent-Length: %d\r\n\r\n" %
                 (m, p, len(b))).encode() + b for m, p, b in
                ((m, p, json.dumps(body).encode()) for m, p, body in chunk)))
            out.extend(self.reply() for _ in chunk)
        return out


def granted(c):
    c.send("GET", "/metrics")
    status = int(c.f.readline().split()[1])
    n = 0
    while True:
        h = c.f.readline()
        if h in (b"\r\n", b""):
            break
        k, _, v = h.decode().partition(":")
        if k.lower() == "content-length":
            n = int(v)
    text = c.f.read(n).decode()
    assert status == 200
    return int(next(x.split()[1] for x in text.splitlines()
                    if x.startswith("semad_tickets_granted_total ")))


def take_tickets(c, name, n, **body):
    body.setdefault("keepalive_ms", 3600000)
    replies = c.pipeline([("POST", "/v1/semaphores/%s/tickets" % name, body)] * n)
    assert all(st == 201 for st, _ in replies), replies[:3]
    return replies


def scale():
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 100000
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 10
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n // 10 + 1000), hard))
    # room for the 1,000 warm-up tickets and the probe too, whatever N
    srv, host, port = start("--max-waiters-per-semaphore", str(2 * n + 2000),
                            "--max-waiters", str(4 * n + 4000))
    try:
        c = Conn(host, port)
        # memory: N waiting tickets behind a full semaphore
        assert c.call("PUT", "/v1/semaphores/line", {"capacity": 1})[0] == 201
        assert c.call("POST", "/v1/semaphores/line/acquire", {"timeout_ms": 0})[0] == 200
        take_tickets(c, "line", 1000)  # warm the allocator and the tables
        time.sleep(0.2)
        before = rss_kib(srv.pid)
        take_tickets(c, "line", n)
        time.sleep(0.2)
        after = rss_kib(srv.pid)
        per_ticket = (after - before) * 1024 / n
        st, tail = c.call("POST", "/v1/semaphores/line/tickets", {"keepalive_ms": 3600000})
        assert st == 201, (st, tail)
        assert tail["position"] == n + 1001, tail["position"]
        # the peer: parked long-poll acquires (one connection each)
        m = n // 10
        assert c.call("PUT", "/v1/semaphores/peer", {"capacity": 1})[0] == 201
        assert c.call("POST", "/v1/semaphores/peer/acquire", {"timeout_ms": 0})[0] == 200
        time.sleep(0.2)
        before = rss_kib(srv.pid)
        socks = []
        for _ in range(m):
            k = socket.create_connection((host, port))
            k.sendall(b"POST /v1/semaphores/peer/acquire HTTP/1.1\r\nHost: b\r\n"
                      b"Content-Length: 2\r\n\r\n{}")
            socks.append(k)
        while c.call("GET", "/v1/semaphores/peer")[1]["waiting"] < m:
            time.sleep(0.1)
        after = rss_kib(srv.pid)
        per_waiter = (after - before) * 1024 / m
        print("figure ticket_memory tickets=%d bytes_per_waiting_ticket=%.0f "
              "parked_acquires=%d bytes_per_parked_acquire=%.0f ratio=%.3f" %
              (n, per_ticket, m, per_waiter, per_ticket / per_waiter))
        for k in socks:
            k.close()
        c.call("DELETE", "/v1/semaphores/line")
        c.call("DELETE", "/v1/semaphores/peer")
        # CPU: a line of ~N moving at 1,000 grants/s, beside the same flow with no line
        flow = {}
        for label, line in (("no_line", 0), ("line", n)):
            name = "flow-" + label
            assert c.call("PUT", "/v1/semaphores/" + name, {"capacity": 1000})[0] == 201
            take_tickets(c, name, 1000 + line, ttl_ms=1000)
            time.sleep(2.0)  # the first grants expire and the steady state sets in
            t0, c0, g0 = time.monotonic(), cpu_s(srv.pid), granted(c)
            sent = 0
            while time.monotonic() - t0 < seconds:
                due = int((time.monotonic() - t0) * 1000) - sent
                if due > 0:
                    take_tickets(c, name, due, ttl_ms=1000)
                    sent += due
                time.sleep(0.01)
            wall, cpu = time.monotonic() - t0, cpu_s(srv.pid) - c0
            grants = (granted(c) - g0) / wall
            st, v = c.call("GET", "/v1/semaphores/" + name)
            flow[label] = (cpu / wall, v["waiting"], sent / wall, grants)
            c.call("DELETE", "/v1/semaphores/" + name)
        print("figure ticket_line_cpu waiting_at_end=%d new_tickets_per_s=%.0f grants_per_s=%.0f "
              "server_cpu_s_per_s=%.4f no_line: waiting_at_end=%d grants_per_s=%.0f "
              "server_cpu_s_per_s=%.4f ratio=%.2f" %
              (flow["line"][1], flow["line"][2], flow["line"][3], flow["line"][0],
               flow["no_line"][1], flow["no_line"][3], flow["no_line"][0],
               flow["line"][0] / max(flow["no_line"][0], 1e-9)))
    finally:
        srv.terminate()
        srv.wait()


PHASES = [  # (name, hold time in ms)
    ("uniform_100_300", lambda r: r.uniform(100, 300)),
    ("lognormal_mean_400", lambda r: r.lognormvariate(5.7, 0.7)),
    ("mix_50_or_1000", lambda r: 50 if r.random() < 0.8 else 1000),
]


def estimate():
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 60
    rnd = random.Random(SEED)
    srv, host, port = start("--ticket-poll", "100ms")
    granted_at = {}
    try:
        c = Conn(host, port)
        assert c.call("PUT", "/v1/semaphores/est", {"capacity": 4})[0] == 201
        ev = socket.create_connection((host, port))
        ev.sendall(b"GET /v1/semaphores/est/events HTTP/1.1\r\nHost: b\r\n\r\n")

        def events():
            f = ev.makefile("rb")
            for raw in f:
                if raw.startswith(b"data: "):
                    d = json.loads(raw[6:])
                    if "lease" in d and d.get("owner") and d["owner"] not in granted_at:
                        granted_at[d["owner"]] = time.monotonic()
        threading.Thread(target=events, daemon=True).start()
        time.sleep(0.3)
        tickets = []  # (owner, taken_at, reply, hold_ms, phase)
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < seconds:
            phase = PHASES[int((time.monotonic() - t0) / (seconds / len(PHASES))) % len(PHASES)]
            for _ in range(20):
                hold = max(10, int(phase[1](rnd)))
                owner = "t%d" % i
                i += 1
                st, r = c.call("POST", "/v1/semaphores/est/tickets",
                               {"ttl_ms": hold, "owner": owner, "keepalive_ms": 600000})
                tickets.append((owner, time.monotonic(), r, hold, phase[0]))
            time.sleep(2.0)
        deadline = time.monotonic() + 30
        while len(granted_at) < len(tickets) and time.monotonic() < deadline:
            time.sleep(0.1)
        mean_hold = sum(t[3] for t in tickets) / len(tickets)
        errs, static_errs, within, nulls, by_phase, static_by_phase = [], [], 0, 0, {}, {}
        for owner, taken, r, hold, phase in tickets:
            if r["status"] != "waiting" or owner not in granted_at:
                continue
            actual = (granted_at[owner] - taken) * 1000
            if actual < 20:
                continue  # granted as good as at once: no wait to estimate
            if r["estimate_ms"] is None:
                nulls += 1
                continue
            e = abs(r["estimate_ms"]["p50"] - actual) / actual
            errs.append(e)
            by_phase.setdefault(phase, []).append(e)
            within += actual <= r["estimate_ms"]["p90"]
            static = r["position"] * mean_hold / 4
            static_errs.append(abs(static - actual) / actual)
            static_by_phase.setdefault(phase, []).append(static_errs[-1])

        def p50(a):
            a = sorted(a)
            return a[len(a) // 2] if a else float("nan")
        print("figure ticket_estimate tickets=%d estimated=%d null=%d p50_rel_error=%.3f "
              "within_p90=%.3f static_p50_rel_error=%.3f ratio=%.2f %s" %
              (len(tickets), len(errs), nulls, p50(errs), within / max(1, len(errs)),
               p50(static_errs), p50(errs) / p50(static_errs),
               " ".join("%s=%.3f(static %.3f)" % (k, p50(v), p50(static_by_phase[k]))
                       for k, v in by_phase.items())))
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":  # bench/redis_tickets.py borrows Conn
    if mode == "scale":
        scale()
    elif mode == "estimate":
        estimate()
    else:
        sys.exit("usage: bench/tickets.py BUILD scale [N] [SECONDS] | estimate [SECONDS]")
