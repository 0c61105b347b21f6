#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""python_client.py - acquire+release pairs/s of the Python client from one Python process,
beside raw requests on the same kind of connections and beside redis-py on the Redis/Lua
semaphore, in one run.

Six loads, each N concurrent holders looping acquire then release on a capacity of N (so
nothing waits), alternated round by round:
  threads  client  sema.Client shared by N threads (sem.acquire(ttl=60), permit.release())
  threads  raw     N threads, each its own http.client connection, sending the same two
                   requests (the same body and an Idempotency-Key) and reading the lease id
  asyncio  client  sema.AsyncClient shared by N tasks
  asyncio  raw     N tasks, each its own asyncio stream connection, the same bytes
  threads  redis   redis-py (Debian's python3-redis) from N threads, EVALSHA of the Lua
                   semaphore of bench/bench_redis_peer.c (read from that file) and ZREM
  asyncio  redis   redis.asyncio from N tasks, the same scripts
semad runs with --durability none and redis-server without persistence, both started on
loopback ports as the tests start them (tests/integration/semad_fixture.py, redis_fixture.py). The figures are medians over the rounds; CPU is this process's
(user+system) per pair. Each load checks that nothing is left held.

Usage: python3 bench/python_client.py [--semad build/bin/semad] [--holders 50]
                                      [--seconds 3] [--rounds 3]
       python3 bench/python_client.py --instructions 2000   (one holder under callgrind:
       user-space instructions per pair of the client and of raw requests, N and 2N pairs)
Run it with the python3 that has redis-py (Debian's /usr/bin/python3).
"""
import argparse
import asyncio
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python", "src"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import redis_fixture as rf  # noqa: E402
import semad_fixture as fx  # noqa: E402
import sema  # noqa: E402

try:
    import redis
    import redis.asyncio
except ImportError:  # the Redis rows are left out (Debian: python3-redis)
    redis = None

TTL_MS = 60000


# ---- the servers: semad and redis-server as the tests start them ----

def start_semad(path):
    os.environ["SEMAD"] = os.path.abspath(path)
    return fx.Semad(durability="none")


def start_redis():
    if shutil.which("redis-server") is None or redis is None:
        return None
    return rf.RedisServer()


def lua_scripts():
    """The acquire and release scripts of bench/bench_redis_peer.c, the Redis/Lua semaphore
    semad is compared with elsewhere: read from the C source, so both use the same text."""
    with open(os.path.join(HERE, "bench_redis_peer.c")) as f:
        src = f.read()
    out = []
    for name in ("acquire_lua", "release_lua"):
        m = re.search(r"static const char %s\[\]\s*=\s*((?:\s*\"(?:[^\"\\]|\\.)*\")+)\s*;"
                      % name, src)
        if m is None:
            raise SystemExit("bench_redis_peer.c: no %s" % name)
        parts = re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(1))
        out.append("".join(p.encode().decode("unicode_escape") for p in parts))
    return out


# ---- one round ----

def cpu():
    t = os.times()
    return t.user + t.system


COUNT = None  # --one: each holder makes this many pairs instead of running for a time


def threads_round(holders, seconds, pair, setup=None):
    """`pair(state)` looped by `holders` threads for `seconds`: pairs/s and CPU per pair."""
    stop = threading.Event()
    counts = [0] * holders
    go = threading.Barrier(holders + 1)

    def loop(i):
        state = setup(i) if setup else None
        go.wait()
        n = 0
        while not stop.is_set() and n != COUNT:
            pair(state)
            n += 1
        counts[i] = n

    ts = [threading.Thread(target=loop, args=(i,)) for i in range(holders)]
    for t in ts:
        t.start()
    go.wait()
    c0, t0 = cpu(), time.monotonic()
    if COUNT is None:
        time.sleep(seconds)
    else:
        for t in ts:
            t.join()
    stop.set()
    for t in ts:
        t.join()
    took, used = time.monotonic() - t0, cpu() - c0
    total = sum(counts)
    return total / took, used / max(total, 1) * 1e6


def asyncio_round(holders, seconds, pair, setup=None, teardown=None):
    async def main():
        states = [await setup(i) if setup else None for i in range(holders)]
        counts = [0] * holders
        stop = False

        async def loop(i):
            n = 0
            while not stop and n != COUNT:
                await pair(states[i])
                n += 1
            counts[i] = n

        c0, t0 = cpu(), time.monotonic()
        tasks = [asyncio.ensure_future(loop(i)) for i in range(holders)]
        if COUNT is None:
            await asyncio.sleep(seconds)
        else:
            await asyncio.gather(*tasks)
        stop = True
        await asyncio.gather(*tasks)
        took, used = time.monotonic() - t0, cpu() - c0
        if teardown:
            await teardown(states)
        total = sum(counts)
        return total / took, used / max(total, 1) * 1e6

    return asyncio.run(main())


# ---- the loads ----

class Loads:
    def __init__(self, url, redis_port, holders):
        self.url, self.redis_port, self.holders = url, redis_port, holders
        self.client = sema.Client(url, max_idle=holders + 8)
        self.sem = self.client.semaphore("bench-python")
        self.sem.create(holders)
        self.owner = "%s:%d" % (socket.gethostname(), os.getpid())  # as the client sends
        self.host, self.port = url.split("//")[1].split(":")
        self.port = int(self.port)
        self.path = "/v1/semaphores/bench-python/acquire"
        if redis_port:
            self.lua_acquire, self.lua_release = lua_scripts()
            r = redis.Redis(port=redis_port)
            self.sha_acquire = r.script_load(self.lua_acquire)
            self.sha_release = r.script_load(self.lua_release)

    def body(self):
        return json.dumps({"ttl_ms": TTL_MS, "owner": self.owner, "weight": 1},
                          separators=(",", ":")).encode()

    def check_semad(self):
        st = self.sem.state()
        assert st.held == 0 and st.waiting == 0, "left held: %r" % (st,)

    # threads
    def client_threads(self, seconds):
        sem = self.sem

        def pair(_):
            sem.acquire(ttl=TTL_MS / 1000).release()
        return threads_round(self.holders, seconds, pair)

    def raw_threads(self, seconds):
        body, path = self.body(), self.path
        conns = []

        def setup(i):
            c = http.client.HTTPConnection(self.host, self.port, timeout=30)
            conns.append(c)
            return c

        def pair(c):
            c.request("POST", path, body, {"Content-Type": "application/json",
                                           "Idempotency-Key": os.urandom(16).hex()})
            r = c.getresponse()
            lease = json.loads(r.read())["lease"]
            assert r.status == 200
            c.request("DELETE", "/v1/leases/" + lease)
            r = c.getresponse()
            r.read()
            assert r.status == 204
        out = threads_round(self.holders, seconds, pair, setup)
        for c in conns:
            c.close()
        return out

    def redis_threads(self, seconds):
        r = redis.Redis(port=self.redis_port, max_connections=self.holders + 8)
        seq = iter(range(1 << 62))
        lock = threading.Lock()
        sha_a, sha_r = self.sha_acquire, self.sha_release

        def pair(_):
            with lock:
                holder = "h%d" % next(seq)
            assert r.evalsha(sha_a, 1, "bench-python", self.holders, TTL_MS, holder) == 1
            assert r.evalsha(sha_r, 1, "bench-python", holder) == 1
        out = threads_round(self.holders, seconds, pair)
        assert r.zcard("bench-python") == 0, "left in Redis"
        r.close()
        return out

    # asyncio
    def client_asyncio(self, seconds):
        box = {}

        async def setup(i):
            if "c" not in box:
                box["c"] = sema.AsyncClient(self.url, max_idle=self.holders + 8)
            return box["c"].semaphore("bench-python")

        async def pair(sem):
            await (await sem.acquire(ttl=TTL_MS / 1000)).release()

        async def teardown(_):
            await box["c"].close()
        return asyncio_round(self.holders, seconds, pair, setup, teardown)

    def raw_asyncio(self, seconds):
        body = self.body()
        head = ("POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\nIdempotency-Key: " % (self.path, self.host, self.port,
                                                           len(body))).encode()

        async def read_reply(reader):
            h = await reader.readuntil(b"\r\n\r\n")
            status = int(h.split(b" ", 2)[1])
            m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", h)
            data = await reader.readexactly(int(m.group(1))) if m else b""
            return status, data

        async def setup(i):
            return await asyncio.open_connection(self.host, self.port)

        async def pair(rw):
            reader, writer = rw
            writer.write(head + os.urandom(16).hex().encode() + b"\r\n\r\n" + body)
            status, data = await read_reply(reader)
            assert status == 200
            lease = json.loads(data)["lease"]
            writer.write(("DELETE /v1/leases/%s HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                          % (lease, self.host, self.port)).encode())
            status, _ = await read_reply(reader)
            assert status == 204

        async def teardown(states):
            for _, w in states:
                w.close()
        return asyncio_round(self.holders, seconds, pair, setup, teardown)

    def redis_asyncio(self, seconds):
        box = {"seq": 0}

        async def setup(i):
            if "r" not in box:
                box["r"] = redis.asyncio.Redis(port=self.redis_port,
                                               max_connections=self.holders + 8)
            return box["r"]

        async def pair(r):
            box["seq"] += 1
            holder = "a%d" % box["seq"]
            assert await r.evalsha(self.sha_acquire, 1, "bench-python", self.holders,
                                   TTL_MS, holder) == 1
            assert await r.evalsha(self.sha_release, 1, "bench-python", holder) == 1

        async def teardown(_):
            assert await box["r"].zcard("bench-python") == 0, "left in Redis"
            await box["r"].close()
        return asyncio_round(self.holders, seconds, pair, setup, teardown)


LOADS = [("threads", "raw http.client", "raw_threads"),
         ("threads", "sema.Client", "client_threads"),
         ("threads", "redis-py + Lua", "redis_threads"),
         ("asyncio", "raw asyncio streams", "raw_asyncio"),
         ("asyncio", "sema.AsyncClient", "client_asyncio"),
         ("asyncio", "redis.asyncio + Lua", "redis_asyncio")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--semad", default=os.path.join(HERE, "..", "build", "bin", "semad"))
    ap.add_argument("--holders", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--instructions", type=int, metavar="N",
                    help="instead: user-space instructions per pair under callgrind")
    ap.add_argument("--one", nargs=3, metavar=("LOAD", "PAIRS", "URL"), help=argparse.SUPPRESS)
    o = ap.parse_args()
    if o.one:
        return one(*o.one)
    tmp = tempfile.mkdtemp(prefix="bench-python-")
    semad = start_semad(o.semad)
    url = semad.url("")
    if o.instructions:
        try:
            return instructions(url, o.instructions, tmp)
        finally:
            semad.close()
            shutil.rmtree(tmp, ignore_errors=True)
    rserver = start_redis()
    rport = rserver.port if rserver else None
    try:
        loads = Loads(url, rport, o.holders)
        todo = [x for x in LOADS if rport or "redis" not in x[2]]
        if not rport:
            print("redis-server or redis-py (python3-redis) missing: no Redis rows")
        results = {x[2]: [] for x in todo}
        for rnd in range(o.rounds):
            for _, _, fn in todo:
                results[fn].append(getattr(loads, fn)(o.seconds))
                loads.check_semad()
            print("round %d/%d done" % (rnd + 1, o.rounds), file=sys.stderr)
        report(todo, results, o, rport)
        loads.client.close()
    finally:
        semad.close()
        if rserver:
            rserver.close()
        shutil.rmtree(tmp, ignore_errors=True)


def one(load, pairs, url):
    """One holder making PAIRS pairs of LOAD, then exit (what --instructions measures)."""
    global COUNT
    COUNT = int(pairs)
    getattr(Loads(url, None, 1), load)(0)


LOADS_IR = ("raw_threads", "client_threads", "raw_asyncio", "client_asyncio")


def instructions(url, n, tmp):
    """Each client load and its raw peer with one holder under callgrind, for N and 2N
    pairs: the difference over N is the instructions of one pair in this process's user
    space (start-up cancels out), a figure a busy machine does not move."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is needed for --instructions")
    ir = {}
    for load in LOADS_IR:
        got = []
        for count in (n, 2 * n):
            out = os.path.join(tmp, "cg.%s.%d" % (load, count))
            subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                            sys.executable, os.path.abspath(__file__), "--one", load,
                            str(count), url], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            with open(out) as f:
                got.append(int(re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
                               .group(1)))
        ir[load] = (got[1] - got[0]) / n
        print("%-16s %10.0f instructions per pair" % (load, ir[load]))
    print("threads: client/raw %.2fx by instructions per pair; asyncio: client/raw %.2fx"
          % (ir["client_threads"] / ir["raw_threads"], ir["client_asyncio"] / ir["raw_asyncio"]))


def report(todo, results, o, rport):
    med = {fn: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs),
                min(r[0] for r in rs), max(r[0] for r in rs))
           for fn, rs in results.items()}
    print("Python %s, %d holders, %d rounds of %gs (medians; CPU of this process per pair)"
          % (sys.version.split()[0], o.holders, o.rounds, o.seconds))
    print("%-8s %-22s %10s %16s %12s" % ("", "", "pairs/s", "(range)", "CPU/pair"))
    for kind, label, fn in todo:
        rate, cpu_us, lo, hi = med[fn]
        print("%-8s %-22s %10.0f %7.0f-%-8.0f %9.0f µs" % (kind, label, rate, lo, hi, cpu_us))
    for kind, client, raw, peer in (("threads", "client_threads", "raw_threads", "redis_threads"),
                                    ("asyncio", "client_asyncio", "raw_asyncio", "redis_asyncio")):
        line = "%s: raw/client %.2fx by rate, client/raw %.2fx by CPU per pair" % (
            kind, med[raw][0] / med[client][0], med[client][1] / med[raw][1])
        if rport:
            line += "; redis-py/client %.2fx by rate" % (med[peer][0] / med[client][0])
        print(line)
    print("asyncio client beside raw http.client on threads: raw/client %.2fx by rate, "
          "client/raw %.2fx by CPU per pair" % (
              med["raw_threads"][0] / med["client_asyncio"][0],
              med["client_asyncio"][1] / med["raw_threads"][1]))


if __name__ == "__main__":
    main()
