#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""redis_tickets.py - what tickets cost Redis with semad's Redis back end, in one run on a
redis-server of its own (no persistence) and one semad on it, both started here.

  bench/redis_tickets.py [BUILD] [N]     (defaults: ./build, 20000 tickets)

1. Redis time per ticket read (GET /v1/tickets/{id}: one FCALL, which also renews the
   keepalive) at places 1, N/2 and N of a line of N waiting tickets (INFO commandstats'
   usec_per_call over 200 reads each, best of 3 interleaved rounds): the weight ahead is exact in O(log n), so the ratio of
   the last place to the first should stay near 1. Beside it, a plain acquire+release pair's
   FCALLs on another semaphore, measured the same way.
2. Redis memory per waiting ticket (used_memory before and after N tickets, divided by N;
   the answers Redis keeps 15 s for retries are deleted first) beside a parked long-poll
   acquire (N/10 of them, each on its own connection).
Prints `figure ...` and `ratio ...` lines. Redis's own times do not depend much on the load
of the machine (they are measured inside Redis), but a busy machine still adds noise."""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tickets import Conn  # noqa: E402  (one keep-alive connection, pipelined)

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
N = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
ROUNDS = 3


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port)] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=30).stdout


def fcall_us(rport, fn, n):
    cli(rport, "CONFIG", "RESETSTAT")
    for _ in range(n):
        fn()
    v = cli(rport, "INFO", "commandstats")
    m = re.search(r"cmdstat_fcall:calls=(\d+),usec=\d+,usec_per_call=([\d.]+)", v)
    return float(m.group(2)), int(m.group(1))


def drop_answers(rport):
    """Delete the answers Redis keeps 15 s for a retry (sema:r:*): not a ticket's cost."""
    keys = subprocess.run(["redis-cli", "-p", str(rport), "--scan", "--pattern", "sema:r:*"],
                          capture_output=True, text=True, timeout=60).stdout.split()
    for i in range(0, len(keys), 1000):
        cli(rport, "UNLINK", *keys[i:i + 1000])


def used_memory(rport):
    return int(re.search(r"used_memory:(\d+)", cli(rport, "INFO", "memory")).group(1))


def main():
    tmp = tempfile.mkdtemp(prefix="redis-tickets-")
    rport, sport = free_port(), free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", tmp],
                             stdout=subprocess.DEVNULL)
    semad = None
    try:
        for _ in range(100):
            if cli(rport, "PING").strip() == "PONG":
                break
            time.sleep(0.05)
        semad = subprocess.Popen([os.path.join(BUILD, "bin", "semad"), "--listen",
                                  "127.0.0.1:%d" % sport, "--engine",
                                  "redis://127.0.0.1:%d" % rport, "--max-waiters-per-semaphore",
                                  str(2 * N)], stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                c = Conn("127.0.0.1", sport)
                break
            except OSError:
                time.sleep(0.05)
        print("# redis_tickets: %d tickets, %s; %s" % (
            N, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            subprocess.run(["redis-server", "--version"], capture_output=True,
                           text=True).stdout.strip()))
        c.call("PUT", "/v1/semaphores/line", {"capacity": 1})
        c.call("PUT", "/v1/semaphores/plain", {"capacity": 1})
        c.call("PUT", "/v1/semaphores/parked", {"capacity": 1})
        c.call("POST", "/v1/semaphores/line/acquire", {"timeout_ms": 0, "ttl_ms": 3600000})
        c.call("POST", "/v1/semaphores/parked/acquire", {"timeout_ms": 0, "ttl_ms": 3600000})
        mem0 = used_memory(rport)
        ids = []
        for i in range(0, N, 500):  # pipelined, 500 at a time
            k = min(500, N - i)
            for _ in range(k):
                c.send("POST", "/v1/semaphores/line/tickets", {"keepalive_ms": 3600000})
            for _ in range(k):
                st, body = c.reply()
                assert st == 201, (st, body)
                ids.append(body["ticket"])
        drop_answers(rport)
        per_ticket = (used_memory(rport) - mem0) / N
        at, us = {}, None

        def pair():
            st, body = c.call("POST", "/v1/semaphores/plain/acquire", {"timeout_ms": 0})
            c.call("DELETE", "/v1/leases/" + body["lease"])
        for _ in range(ROUNDS):  # interleaved rounds, the best of each
            for place in (1, N // 2, N):
                tid = ids[place - 1]

                def read():
                    st, body = c.call("GET", "/v1/tickets/" + tid)
                    assert st == 200 and body["position"] == place, body
                v = fcall_us(rport, read, 200)[0]
                at[place] = min(at.get(place, v), v)
            v, calls = fcall_us(rport, pair, 200)
            us = v if us is None else min(us, v)
        for place in (1, N // 2, N):
            print("figure redis_ticket_read place=%d of=%d usec_per_fcall=%.2f (best of %d)"
                  % (place, N, at[place], ROUNDS))
        print("figure redis_plain_pair usec_per_fcall=%.2f fcalls_per_pair=%.2f (best of %d)"
              % (us, calls / 200, ROUNDS))
        print("ratio redis_ticket_read_last_vs_first_place value=%.2f" % (at[N] / at[1]))
        print("ratio redis_ticket_read_first_place_vs_plain_fcall value=%.2f" % (at[1] / us))
        # parked long-poll acquires, each on its own connection
        mem1 = used_memory(rport)
        nparked = max(1, N // 10)
        conns = []
        for _ in range(nparked):
            p = Conn("127.0.0.1", sport)
            p.send("POST", "/v1/semaphores/parked/acquire", {"timeout_ms": 3600000})
            conns.append(p)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            st, body = c.call("GET", "/v1/semaphores/parked")
            if body["waiting"] == nparked:
                break
            time.sleep(0.1)
        drop_answers(rport)
        per_parked = (used_memory(rport) - mem1) / nparked
        print("figure redis_memory_per_waiting_ticket bytes=%.0f tickets=%d" % (per_ticket, N))
        print("figure redis_memory_per_parked_acquire bytes=%.0f parked=%d"
              % (per_parked, nparked))
        print("ratio redis_memory_ticket_vs_parked_acquire value=%.2f" % (per_ticket / per_parked))
        for p in conns:
            p.s.close()
    finally:
        if semad is not None:
            semad.terminate()
            semad.wait(30)
        redis.terminate()
        redis.wait(30)


if __name__ == "__main__":
    main()
