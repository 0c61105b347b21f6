#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""redis_idle.py - what parked waiters cost Redis while they sit idle: WAITERS long-poll
acquires parked on one semad instance (on a redis-server of its own, no persistence), then
IDLE_SECS of nothing but the instance's heartbeats; and the same with no waiter, beside.
Redis times every command (SLOWLOG with a 0 µs threshold); printed are the longest script
call (FCALL) in each window, the script calls per second, and Redis's CPU per second
(user+sys, INFO cpu). A heartbeat that looks at each waiter shows up as a call that grows with
WAITERS; one that does not stays the same.

Usage: bench/redis_idle.py [BUILD_DIR]      (default: $SEMA_BUILD_DIR or ./build)
Environment: WAITERS (default 5000), IDLE_SECS (default 10).
Prints "figure redis_idle waiters=N longest_fcall_us=... median_fcall_us=... fcalls_per_s=...
redis_cpu_ms_per_s=...". (The slowlog times a call by the clock: on a loaded machine a call
the kernel preempts looks longer; compare the two windows of one run.)
"""
import json
import os
import resource
import subprocess
import sys
import time

from bench_env import BUILD, ROOT  # noqa: E402,F401 (the build, the fixtures' path)
import redis_fixture as rf  # noqa: E402
import semad_fixture as fx  # noqa: E402

WAITERS = int(os.environ.get("WAITERS", "5000"))
IDLE_SECS = float(os.environ.get("IDLE_SECS", "10"))


def cpu_s(r):
    """Redis's CPU time (user+sys, s) from INFO cpu: getrusage's, finer than /proc's ticks."""
    info = dict(line.split(":", 1) for line in r.cli("INFO", "cpu").splitlines() if ":" in line)
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def window(r):
    """IDLE_SECS of idle: (longest FCALL in µs, FCALLs per second, Redis CPU ms per second)."""
    r.cli("SLOWLOG", "RESET")
    before = cpu_s(r)
    time.sleep(IDLE_SECS)
    used = cpu_s(r) - before
    log = json.loads(r.cli("--json", "SLOWLOG", "GET", "1000000") or "[]")
    calls = sorted(e[2] for e in log if str(e[3][0]).lower() == "fcall")
    median = calls[len(calls) // 2] if calls else 0
    if os.environ.get("VERBOSE"):
        print("# fcalls (us, op):", sorted((e[2], e[3][4]) for e in log
                                          if str(e[3][0]).lower() == "fcall"), flush=True)
    return (calls[-1] if calls else 0, median, len(calls) / IDLE_SECS, used * 1000 / IDLE_SECS)


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a socket per parked waiter
    print("# redis_idle: %d waiters, %.0f s idle, %s" % (
        WAITERS, IDLE_SECS, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())), flush=True)
    with rf.RedisServer() as r, rf.Fleet(r.url(), 1, "--max-connections", "30000",
                                         "--max-connections-per-ip", "30000",
                                         "--max-waiters", "100000",
                                         "--max-waiters-per-semaphore", "100000") as fl:
        r.cli("CONFIG", "SET", "slowlog-log-slower-than", "0")
        r.cli("CONFIG", "SET", "slowlog-max-len", "1000000")
        s = fl[0]
        time.sleep(2.5)  # a heartbeat or two with nobody waiting
        for n in (0, WAITERS):
            socks = []
            if n:
                s.json("PUT", "/v1/semaphores/idle", {"capacity": 1})
                st, holder = s.json("POST", "/v1/semaphores/idle/acquire", {"ttl_ms": 3600000})
                assert st == 200, (st, holder)
                for _ in range(n):
                    c = s.raw(timeout=300)
                    c.sendall(fx.raw_request("POST", "/v1/semaphores/idle/acquire",
                                             {"ttl_ms": 60000}))
                    socks.append(c)
                fx.wait_until(lambda: s.json("GET", "/v1/semaphores/idle")[1]["waiting"] == n,
                              300, "%d waiters to park" % n)
                time.sleep(1.0)
            longest, median, rate, cpu = window(r)
            print("figure redis_idle waiters=%d longest_fcall_us=%d median_fcall_us=%d"
                  " fcalls_per_s=%.2f redis_cpu_ms_per_s=%.2f" % (n, longest, median, rate, cpu),
                  flush=True)
            for c in socks:
                c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
