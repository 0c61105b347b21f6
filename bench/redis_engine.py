#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""redis_engine.py - semad's Redis back end beside the Redis semaphores people use, on one
redis-server, in one run. Starts everything itself on ephemeral loopback ports (a
redis-server without persistence, two semad instances with --engine redis://..., the
Redis/Lua peer build/bin/bench_redis_peer, redis-semaphore from bench/peers/node_modules)
and stops it at the end. Prints one line per figure ("figure NAME key=value ...") and per
ratio or goal ("ratio NAME value=X ...", "goal NAME value=X goal=<Y met=yes|no").

1. Redis commands per acquire+release pair, counted with MONITOR (the commands clients
   send; the commands a script runs inside Redis are listed apart): semad on one and on two
   instances (one connection, `sema bench -c 1`), the Redis/Lua peer and redis-semaphore.
   Goal: 2 (one script per operation).
2. Redis commands per second while WAITERS waiters sit parked on the two instances for
   IDLE_SECS: only the instances' heartbeats.
3. pairs/s and pair p99 through two semad instances on the Redis (`sema bench -s A -s B`,
   CONNS connections spread over both), beside the Redis/Lua semaphore (bench_redis_peer,
   CONNS hiredis connections) and redis-semaphore (CONNS ioredis connections) on the same
   Redis; Redis's CPU time per pair for each, and semad's; beside them one semad on the
   embedded engine (--durability none: nothing written), whose CPU per pair is the peer of
   semad's on Redis. ROUNDS interleaved rounds, best of each.
4. Wake-up latency of a waiter parked on instance B after a release on instance A
   (`sema bench -s A -s B -m handoff`: the direction alternates), p50 and p99. Goal p50 under
   10 ms (a message, not a poll).

Usage: bench/redis_engine.py [BUILD_DIR]     (default: $SEMA_BUILD_DIR or ./build)
Environment: SECS (seconds per throughput run, default 3), ROUNDS (default 3), CONNS
(default 50), WAITERS (default 1000), IDLE_SECS (default 10), HANDOFFS (default 1000),
PAIRS (pairs counted for figure 1, default 1000).
"""
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time

from bench_env import BUILD, ROOT  # noqa: E402,F401 (the build, the fixtures' path)
import redis_fixture as rf  # noqa: E402
import semad_fixture as fx  # noqa: E402

SECS = float(os.environ.get("SECS", "3"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
CONNS = int(os.environ.get("CONNS", "50"))
WAITERS = int(os.environ.get("WAITERS", "1000"))
IDLE_SECS = float(os.environ.get("IDLE_SECS", "10"))
HANDOFFS = int(os.environ.get("HANDOFFS", "1000"))
PAIRS = int(os.environ.get("PAIRS", "1000"))

SEMA = os.path.join(BUILD, "bin", "sema")
PEER = os.path.join(BUILD, "bin", "bench_redis_peer")
NODE_SEM = os.path.join(ROOT, "bench", "peers", "redis_sem.js")
HAVE_NODE_SEM = os.path.isdir(os.path.join(ROOT, "bench", "peers", "node_modules",
                                           "redis-semaphore"))
HZ = os.sysconf("SC_CLK_TCK")


def say(*words):
    print(" ".join(str(w) for w in words), flush=True)


def cpu_s(pid):
    return sum(cpu_us_sys(pid))


def cpu_us_sys(pid):
    """(user, system) CPU seconds of process pid."""
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return int(v[11]) / HZ, int(v[12]) / HZ


REDIS_STATS = ("total_net_input_bytes", "total_net_output_bytes", "total_reads_processed",
               "total_writes_processed")


def redis_work(r):
    """What Redis did so far: its user and system CPU, the INFO stats of REDIS_STATS, and the
    microseconds its script commands (FCALL, EVALSHA) ran by its own clock."""
    u, y = cpu_us_sys(r.proc.pid)
    info = r.info("all")
    out = {"user": u, "sys": y, "script_us": 0}
    for k in REDIS_STATS:
        out[k] = int(info.get(k, "0"))
    for k in ("cmdstat_fcall", "cmdstat_evalsha"):
        m = re.search(r"usec=(\d+)", info.get(k, ""))
        out["script_us"] += int(m.group(1)) if m else 0
    return out


def run_json(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, timeout=timeout)
    line = next((l for l in p.stdout.decode().splitlines() if l.startswith("{")), None)
    if p.returncode != 0 or line is None:
        raise RuntimeError("%s failed (%d): %s %s" % (" ".join(cmd), p.returncode,
                                                        p.stdout.decode()[-500:],
                                                        p.stderr.decode()[-1500:]))
    return json.loads(line)


def counted(mon, fn):
    """Runs fn() between two marks; returns (fn's result, client commands, script commands)
    in its window (MONITOR lines arrive a moment late: wait for them)."""
    t0 = time.time()
    res = fn()
    t1 = time.time()
    time.sleep(0.5)
    c, s = mon.count(t0, t1)
    return res, c, s


def fmt(d):
    return ",".join("%s:%d" % kv for kv in sorted(d.items(), key=lambda kv: -kv[1])) or "-"


def main():
    for p in (SEMA, PEER, os.environ["SEMAD"]):
        if not os.access(p, os.X_OK):
            sys.exit("redis_engine: %s is missing; build first (cmake --build %s)" % (p, BUILD))
    if not rf.redis_engine_built():
        sys.exit("redis_engine: this semad has no Redis back end (--engine redis://...)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # parked waiters: a socket each
    say("# redis_engine: %d cores, %d connections, %.1fs per throughput run, %s; redis-server %s"
        % (os.cpu_count(), CONNS, SECS, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           subprocess.run(["redis-server", "--version"], capture_output=True).stdout.decode()
           .split()[2]))
    with rf.RedisServer() as r, rf.Fleet(r.url(), 2, "--max-connections", "30000") as fl, \
            fx.SemadProcess("--max-connections", "30000") as emb:
        a, b = fl[0], fl[1]
        ua, ub = "http://127.0.0.1:%d" % a.port, "http://127.0.0.1:%d" % b.port
        mon = rf.Monitor(r.port)
        try:
            commands_per_pair(r, mon, ua, ub)
            idle_waiters(r, mon, fl)
        finally:
            mon.close()
        throughput(r, fl, ua, ub, emb)
        wakeups(ua, ub)


def commands_per_pair(r, mon, ua, ub):
    # 1. commands per pair, one connection, nothing else running
    # the semaphores first (capacity 1 and 2: nobody waits; made here, a bench run keeps
    # them), and the instances warmed up
    for name, cap in (("cmd", "1"), ("cmd2", "2")):
        subprocess.run([SEMA, "--server", ua, "create", name, cap], capture_output=True,
                       timeout=60, check=True)
    subprocess.run([SEMA, "bench", "-s", ua, "-c", "1", "-n", "10", "--name", "cmd",
                    "--no-create", "--json"], capture_output=True, timeout=60)
    subprocess.run([SEMA, "bench", "-s", ua, "-s", ub, "-c", "2", "-n", "10", "--name", "cmd2",
                    "--no-create", "--json"], capture_output=True, timeout=60)
    time.sleep(0.5)
    rows = []
    for label, cmd in (("semad_1_instance", [SEMA, "bench", "-s", ua, "-c", "1", "-n", str(PAIRS),
                                             "--name", "cmd", "--no-create", "--json"]),
                       ("semad_2_instances", [SEMA, "bench", "-s", ua, "-s", ub, "-c", "2", "-n",
                                              str(PAIRS), "--name", "cmd2", "--no-create",
                                              "--json"]),
                       ("redis_lua", [PEER, "--redis", "127.0.0.1:%d" % r.port, "-c", "1", "-n",
                                      str(PAIRS), "--json"])):
        j, c, s = counted(mon, lambda: run_json(cmd))
        pairs = j.get("ops") or j.get("pairs") or 0
        rows.append((label, pairs, c, s))
    if HAVE_NODE_SEM:
        j, c, s = counted(mon, lambda: run_json(["node", NODE_SEM, "--redis",
                                                 "127.0.0.1:%d" % r.port, "-c", "1", "-d",
                                                 "1"]))
        # its 0.3 s warm-up is in the window too: count the pairs it made in all
        rows.append(("redis_semaphore", None, c, s))
    for label, pairs, c, s in rows:
        if pairs is None:  # redis-semaphore: its release is one ZREM, sent by the client
            pairs = max(1, c.get("zrem", 0))
        n = sum(c.values())
        say("figure redis_commands_per_pair_%s pairs=%d commands=%d per_pair=%.2f"
            " script_commands_per_pair=%.1f by_command=%s" % (
                label, pairs, n, n / pairs, sum(s.values()) / pairs, fmt(c)))
        if label.startswith("semad"):
            v = n / pairs
            say("goal redis_commands_per_pair_%s value=%.2f goal=<=2 met=%s"
                % (label, v, "yes" if v <= 2.005 else "no"))


def idle_waiters(r, mon, fl):
    # 2. WAITERS parked on the two instances; Redis's command rate over IDLE_SECS
    fl.json("PUT", "/v1/semaphores/idle", {"capacity": 1})
    st, holder = fl.json("POST", "/v1/semaphores/idle/acquire", {"ttl_ms": 3600000})
    socks = []
    for i in range(WAITERS):
        s = fl[i % 2].raw(timeout=120)
        s.sendall(fx.raw_request("POST", "/v1/semaphores/idle/acquire", {"ttl_ms": 60000}))
        socks.append(s)
    fx.wait_until(lambda: fl.json("GET", "/v1/semaphores/idle")[1]["waiting"] == WAITERS, 60,
                  "%d waiters to park" % WAITERS)
    time.sleep(1.0)
    before = cpu_s(r.proc.pid)
    _, c, s = counted(mon, lambda: time.sleep(IDLE_SECS))
    used = cpu_s(r.proc.pid) - before
    n = sum(c.values())
    say("figure redis_idle_waiters waiters=%d seconds=%.0f commands_per_s=%.2f"
        " script_commands_per_s=%.1f redis_cpu_ms_per_s=%.2f by_command=%s" % (
            WAITERS, IDLE_SECS, n / IDLE_SECS, sum(s.values()) / IDLE_SECS,
            used * 1000 / IDLE_SECS, fmt(c)))
    say("goal redis_idle_commands_per_s_per_1000_waiters value=%.2f goal=<10 met=%s" % (
        n / IDLE_SECS * 1000 / WAITERS, "yes" if n / IDLE_SECS * 1000 / WAITERS < 10 else "no"))
    for s in socks:
        s.close()
    fl.request("DELETE", "/v1/leases/" + holder["lease"])
    fx.wait_until(lambda: fl.json("GET", "/v1/semaphores/idle")[1]["waiting"] == 0, 60,
                  "the waiters to leave")


def best(a, b, key):
    if a is None:
        return b
    return a if (a.get(key) or 0) >= (b.get(key) or 0) else b


def throughput(r, fl, ua, ub, emb):
    # 3. pairs/s and p99, interleaved rounds; Redis CPU per pair
    res = {}
    ue = "http://127.0.0.1:%d" % emb.port

    def timed(label, cmd, pairs_key, semads=None):
        semads = fl.live() if semads is None else semads
        w0, s0 = redis_work(r), sum(cpu_s(s.proc.pid) for s in semads)
        j = run_json(cmd)
        w1, n = redis_work(r), max(1, j.get(pairs_key) or 0)
        j["redis_cpu_us_per_pair"] = round((w1["user"] + w1["sys"] - w0["user"] - w0["sys"])
                                           * 1e6 / n, 2)
        # where Redis's CPU went: user and system time, the scripts' own time (by Redis's
        # clock), bytes in and out, and reads and writes (one a syscall each: commands per
        # read is the depth of the pipelines Redis was sent)
        j["redis_split"] = "user_us=%.2f sys_us=%.2f script_us=%.2f in_bytes=%.0f " \
            "out_bytes=%.0f reads=%.3f writes=%.3f" % (
                (w1["user"] - w0["user"]) * 1e6 / n, (w1["sys"] - w0["sys"]) * 1e6 / n,
                (w1["script_us"] - w0["script_us"]) / n,
                *((w1[k] - w0[k]) / n for k in REDIS_STATS))
        j["semad_cpu_us_per_pair"] = round((sum(cpu_s(s.proc.pid) for s in semads) - s0) * 1e6
                                           / max(1, j.get(pairs_key) or 0), 2)
        j["pairs_per_s"] = j.get("pairs_per_s", j.get("ops_per_s"))
        j["pair_p99_us"] = j.get("pair_p99_us", j.get("op_p99_us"))
        j["pair_p50_us"] = j.get("pair_p50_us", j.get("op_p50_us"))
        res[label] = best(res.get(label), j, "pairs_per_s")

    d = str(SECS)
    for _ in range(ROUNDS):
        timed("semad_2_instances", [SEMA, "bench", "-s", ua, "-s", ub, "-c", str(CONNS), "-d",
                                    d + "s", "--name", "tp2", "--json"], "ops")
        timed("semad_1_instance", [SEMA, "bench", "-s", ua, "-c", str(CONNS), "-d", d + "s",
                                   "--name", "tp1", "--json"], "ops")
        timed("semad_embedded", [SEMA, "bench", "-s", ue, "-c", str(CONNS), "-d", d + "s",
                                 "--name", "tpe", "--json"], "ops", [emb])
        timed("redis_lua", [PEER, "--redis", "127.0.0.1:%d" % r.port, "-c", str(CONNS), "-d",
                            d + "s", "--json"], "pairs")
        if HAVE_NODE_SEM:
            timed("redis_semaphore", ["node", NODE_SEM, "--redis", "127.0.0.1:%d" % r.port, "-c",
                                      str(CONNS), "-d", d], "pairs")
    for label, j in res.items():
        say("figure redis_pairs_%s conns=%d pairs_per_s=%s pair_p50_us=%s pair_p99_us=%s"
            " errors=%s redis_cpu_us_per_pair=%s semad_cpu_us_per_pair=%s" % (
                label, CONNS, j["pairs_per_s"], j["pair_p50_us"], j["pair_p99_us"],
                j.get("errors"), j["redis_cpu_us_per_pair"],
                j["semad_cpu_us_per_pair"] if label.startswith("semad") else "-"))
        if label != "semad_embedded":
            say("figure redis_work_per_pair_%s %s" % (label, j["redis_split"]))
    two, one, e = res["semad_2_instances"], res["semad_1_instance"], res["semad_embedded"]
    say("ratio semad_cpu_per_pair_redis_vs_embedded value=%.3f (one instance; lower is better)"
        % (one["semad_cpu_us_per_pair"] / max(1e-9, e["semad_cpu_us_per_pair"])))
    for peer in ("redis_lua", "redis_semaphore"):
        if peer not in res:
            continue
        p = res[peer]
        say("ratio semad_2_instances_pairs_vs_%s value=%.3f" % (
            peer, (two["pairs_per_s"] or 0) / max(1e-9, p["pairs_per_s"] or 0)))
        say("ratio semad_2_instances_p99_vs_%s value=%.3f (lower is better)" % (
            peer, (two["pair_p99_us"] or 0) / max(1e-9, p["pair_p99_us"] or 0)))
        say("ratio semad_2_instances_redis_cpu_per_pair_vs_%s value=%.3f (lower is better)" % (
            peer, two["redis_cpu_us_per_pair"] / max(1e-9, p["redis_cpu_us_per_pair"])))
    if not HAVE_NODE_SEM:
        say("# redis-semaphore is not installed (scripts/deps.sh bench, or: cd bench/peers && npm ci): skipped")


def wakeups(ua, ub):
    # 4. release on A -> waiter parked on B (and back), one round at a time
    j = run_json([SEMA, "bench", "-s", ua, "-s", ub, "-m", "handoff", "-n", str(HANDOFFS),
                  "--name", "wake2", "--json"])
    one = run_json([SEMA, "bench", "-s", ua, "-m", "handoff", "-n", str(HANDOFFS), "--name",
                    "wake1", "--json"])
    say("figure redis_wakeup_across_instances rounds=%d p50_us=%.0f p90_us=%.0f p99_us=%.0f"
        " max_us=%.0f" % (j["ops"], j["p50_us"], j["p90_us"], j["p99_us"], j["max_us"]))
    say("figure redis_wakeup_same_instance rounds=%d p50_us=%.0f p90_us=%.0f p99_us=%.0f"
        " max_us=%.0f" % (one["ops"], one["p50_us"], one["p90_us"], one["p99_us"],
                          one["max_us"]))
    say("goal redis_wakeup_across_instances_p50_us value=%.0f goal=<10000 met=%s"
        % (j["p50_us"], "yes" if j["p50_us"] < 10000 else "no"))
    say("ratio redis_wakeup_across_vs_same_instance_p50 value=%.3f" % (
        j["p50_us"] / max(1e-9, one["p50_us"])))


if __name__ == "__main__":
    main()
