#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""redis_cluster.py - semad on Redis Cluster (one primary, and three) beside semad on one
redis-server, in one run: what the cluster costs Redis per pair, how the work spreads over the
primaries, and what one hot semaphore gets. Starts everything itself on ephemeral loopback
ports (the clusters without replicas, so that only primaries use the machine's cores; two semad
instances on each back end) and stops it at the end. Prints one line per figure ("figure NAME
key=value ...") and per ratio.

For each back end, `sema bench -s A -s B --no-create` through both instances: "hot", CONNS
connections on one semaphore; "spread", CONNS connections on SPREAD semaphores (`-k SPREAD`:
connection i takes semaphores i, i + CONNS, ... in turn, so that all SPREAD are in use). The
semaphores are made once, and a first run of each (WARM_SECS) is left out: the steady state.
Then ROUNDS interleaved rounds, best of each. Per run: pairs/s, Redis CPU per pair (every
primary's, INFO cpu) and its system part, Redis commands per pair (all of them, and the script
calls: FCALL), the read events per pair (INFO stats total_reads_processed: one per read() of a
client's socket; commands per read is how much semad's pipelining batches), the primaries' read
and write system calls and context switches per pair (/proc/PID/io syscr + syscw,
/proc/PID/status), bytes in and out per pair, MOVED and ASK answers per 10,000 pairs (INFO
errorstats; goal 0), each primary's share of the Redis CPU and of the script calls, and the
commands other than FCALL (name:calls per 10,000 pairs). Before the runs, each back end's Redis
CPU with nothing to do (idle_us_per_s: server crons and, on a cluster, its bus), measured over
IDLE_SECS with semad running. One semaphore lives on one primary: its share of the work is all
of it (the hot-limit), while many semaphores spread over the primaries.

Usage: bench/redis_cluster.py [BUILD_DIR]     (default: $SEMA_BUILD_DIR or ./build)
Environment: SECS (default 3), ROUNDS (default 3), CONNS (default 60), SPREAD (default 1000),
WARM_SECS (default 10), IDLE_SECS (default 2), NODE_TIMEOUT_MS (default 15000), BACKENDS
(default "one_redis,cluster_1_primary,cluster_3_primaries").
Pairs/s on a busy machine move with its load: the shares of the work and Redis's CPU and
commands per pair are the steadier figures.
"""
import json
import os
import subprocess
import sys
import time

from bench_env import BUILD, ROOT  # noqa: E402,F401 (the build, the fixtures' path)
import redis_cluster_fixture as cf  # noqa: E402
import redis_fixture as rf  # noqa: E402

SECS = float(os.environ.get("SECS", "3"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
CONNS = int(os.environ.get("CONNS", "60"))
SPREAD = int(os.environ.get("SPREAD", "1000"))
IDLE_SECS = float(os.environ.get("IDLE_SECS", "2"))
# The first run of each, left out, lasts longer than an instance's record in a slot lives
# without waiters there (8 s): on a cluster the first use of each slot leaves one, and its
# sweep comes once, 8 s later (2,000 sweeps for 1,000 semaphores through two instances)
WARM_SECS = float(os.environ.get("WARM_SECS", "10"))
# the cluster's node timeout: Redis's default (the tests' 1 s makes failovers quick and the
# cluster bus busier: a node pings each other one every half node timeout)
NODE_TIMEOUT_MS = int(os.environ.get("NODE_TIMEOUT_MS", "15000"))
BACKENDS = os.environ.get("BACKENDS", "one_redis,cluster_1_primary,cluster_3_primaries")
SEMA = os.path.join(BUILD, "bin", "sema")


def say(*words):
    print(" ".join(str(w) for w in words), flush=True)


class One:
    """One redis-server, as the cluster's peer: the same questions."""

    def __init__(self):
        self.r = rf.RedisServer()

    def url(self):
        return self.r.url()

    def nodes(self):
        return [self.r]

    def close(self):
        self.r.close()


class Clu:
    """A cluster of `n` primaries without replicas."""

    def __init__(self, n):
        self.c = cf.Cluster(n, 0, node_timeout_ms=NODE_TIMEOUT_MS)
        self.ps = self.c.primaries()  # (asked once: asking is a command too)

    def url(self):
        return "redis+cluster://" + self.c.seeds()

    def nodes(self):
        return self.ps

    def close(self):
        self.c.close()


MAKERS = {"one_redis": One, "cluster_1_primary": lambda: Clu(1),
          "cluster_3_primaries": lambda: Clu(3)}
STATS = ("total_reads_processed", "total_writes_processed", "total_net_input_bytes",
         "total_net_output_bytes")


def errors(info):
    """MOVED and ASK answers so far (INFO errorstats)."""
    return sum(int(info.get(k, "count=0").split("=", 1)[1].split(",")[0])
               for k in ("errorstat_MOVED", "errorstat_ASK"))


def proc_counts(pid):
    """The kernel's counts of a process: read and write system calls (/proc/PID/io syscr,
    syscw) and context switches (/proc/PID/status)."""
    out = {}
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            k, v = line.split(":")
            if k in ("syscr", "syscw"):
                out[k] = int(v)
    with open("/proc/%d/status" % pid) as f:
        out["ctxsw"] = sum(int(line.split(":")[1]) for line in f if "ctxt_switches" in line)
    return out


def snapshot(be):
    """{port: {"cpu": s, "cmd": {command: calls}, stat: n..., "redirects": n}} of every
    primary (one INFO each)."""
    out = {}
    for n in be.nodes():
        i = n.info("all")
        d = {"cpu": float(i["used_cpu_user"]) + float(i["used_cpu_sys"]),
             "sys": float(i["used_cpu_sys"]), "redirects": errors(i), "cmd": {}}
        d.update(proc_counts(int(i["process_id"])))
        for k, v in i.items():
            if k.startswith("cmdstat_"):
                d["cmd"][k[len("cmdstat_"):]] = int(v.split("calls=", 1)[1].split(",")[0])
        for k in STATS:
            d[k] = int(i.get(k, 0))
        out[n.port] = d
    return out


def delta(a, b):
    """b - a, per primary: {port: {"cpu": .., "cmd": {..}, ...}} (INFO itself is a command
    of each snapshot: left out)."""
    out = {}
    for port, d in b.items():
        o = a.get(port, {"cpu": 0.0, "cmd": {}, "redirects": 0})
        x = {k: d[k] - o.get(k, 0) for k in d if k != "cmd"}
        x["cmd"] = {c: n - o["cmd"].get(c, 0) for c, n in d["cmd"].items()
                    if c != "info" and n - o["cmd"].get(c, 0) > 0}
        out[port] = x
    return out


def idle_cost(be):
    """Redis CPU (µs per second, all primaries) with semad running and nothing asked."""
    a = snapshot(be)
    time.sleep(IDLE_SECS)  # the window measured: nothing decides on it
    d = delta(a, snapshot(be))
    return round(sum(x["cpu"] for x in d.values()) * 1e6 / IDLE_SECS, 1)


def make(fl, k, conns, name):
    """The semaphores of a run, made once before the runs (a run's own set-up and clean-up,
    a PUT and a DELETE per semaphore, would be counted in its figures)."""
    if k == 1:
        st, body = fl[0].json("PUT", "/v1/semaphores/" + name, {"capacity": conns})
        assert st in (200, 201), (st, body)
        return
    p = subprocess.run([SEMA, "bench", "-s", "http://127.0.0.1:%d" % fl[0].port, "-m", "create",
                        "-n", str(k), "--capacity", str(max(1, conns // k)), "--name", name,
                        "--json"], capture_output=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("sema bench -m create failed: %s" % p.stderr[-800:])


def run(be, fl, k, conns, name, secs=None):
    ua, ub = ["http://127.0.0.1:%d" % s.port for s in (fl[0], fl[1])]
    s0 = snapshot(be)
    p = subprocess.run([SEMA, "bench", "-s", ua, "-s", ub, "-c", str(conns), "-d",
                        "%gs" % (secs or SECS), "-k", str(k), "--name", name, "--no-create",
                        "--json"],
                       capture_output=True, timeout=600)
    line = next((l for l in p.stdout.decode().splitlines() if l.startswith("{")), None)
    if p.returncode != 0 or line is None:
        raise RuntimeError("sema bench failed: %s %s" % (p.stdout[-300:], p.stderr[-800:]))
    j = json.loads(line)
    d = delta(s0, snapshot(be))
    pairs = max(1, j["ops"])
    cpu = [x["cpu"] for x in d.values()]
    fcalls = [x["cmd"].get("fcall", 0) for x in d.values()]
    cmds = {}
    for x in d.values():
        for c, n in x["cmd"].items():
            cmds[c] = cmds.get(c, 0) + n

    def per_pair(stat):
        return round(sum(x[stat] for x in d.values()) / pairs, 3)
    return {"pairs_per_s": j.get("pairs_per_s", j.get("ops_per_s")), "errors": j.get("errors", 0),
            "redis_cpu_us_per_pair": round(sum(cpu) * 1e6 / pairs, 2),
            "cmds_per_pair": round(sum(cmds.values()) / pairs, 3),
            "fcalls_per_pair": round(sum(fcalls) / pairs, 3),
            "redis_sys_us_per_pair": round(sum(x["sys"] for x in d.values()) * 1e6 / pairs, 2),
            "reads_per_pair": per_pair("total_reads_processed"),
            "syscalls_rw_per_pair": round(sum(x["syscr"] + x["syscw"] for x in d.values())
                                          / pairs, 3),
            "ctxsw_per_pair": per_pair("ctxsw"),
            "cmds_per_read": round(sum(cmds.values()) / max(1, sum(
                x["total_reads_processed"] for x in d.values())), 2),
            "bytes_in_per_pair": per_pair("total_net_input_bytes"),
            "bytes_out_per_pair": per_pair("total_net_output_bytes"),
            "redirects_per_10k": round(sum(x["redirects"] for x in d.values()) * 10000 / pairs, 2),
            "cpu_shares": ",".join("%.2f" % (v / max(1e-9, sum(cpu)))
                                   for v in sorted(cpu, reverse=True)),
            "calls_shares": ",".join("%.2f" % (v / max(1, sum(fcalls)))
                                     for v in sorted(fcalls, reverse=True)),
            "other_cmds_per_10k": ",".join("%s:%.0f" % (c, n * 10000 / pairs) for c, n in
                                           sorted(cmds.items()) if c != "fcall") or "none"}


def main():
    if not rf.redis_engine_built():
        sys.exit("redis_cluster: this semad has no Redis back end")
    cf.need_cluster_tools()
    say("# redis_cluster: %d cores, load %s, %d connections on 1 semaphore (hot) and on %d "
        "(spread), %.1fs per run, %d rounds" % (
            os.cpu_count(), open("/proc/loadavg").read().split()[0], CONNS, SPREAD, SECS,
            ROUNDS))
    res, idle = {}, {}
    labels = [b for b in BACKENDS.split(",") if b]
    for label in labels:
        be = MAKERS[label]()
        try:
            with rf.Fleet(be.url(), 2, durability="none") as fl:
                for k, conns, tag in ((1, CONNS, "hot"), (SPREAD, CONNS, "spread")):
                    make(fl, k, conns, tag)
                    run(be, fl, k, conns, tag, WARM_SECS)  # (left out: see WARM_SECS)
                idle[label] = idle_cost(be)
                for _ in range(ROUNDS):
                    for k, conns, tag in ((1, CONNS, "hot"), (SPREAD, CONNS, "spread")):
                        j = run(be, fl, k, conns, tag)
                        key = "%s_%s" % (label, tag)
                        if key not in res or j["pairs_per_s"] > res[key]["pairs_per_s"]:
                            res[key] = j
        finally:
            be.close()
    for key, j in res.items():
        label = key.rsplit("_", 1)[0]
        say("figure redis_cluster_%s idle_us_per_s=%s %s" % (
            key, idle[label], " ".join("%s=%s" % kv for kv in j.items())))
    base = labels[0]
    for label in labels[1:]:
        for tag in ("hot", "spread"):
            a, b = res["%s_%s" % (base, tag)], res["%s_%s" % (label, tag)]
            say("ratio redis_%s_%s_pairs_vs_%s value=%.3f" % (
                label, tag, base, b["pairs_per_s"] / max(1e-9, a["pairs_per_s"])))
            say("ratio redis_%s_%s_redis_cpu_per_pair_vs_%s value=%.3f (lower is better)"
                % (label, tag, base, b["redis_cpu_us_per_pair"]
                   / max(1e-9, a["redis_cpu_us_per_pair"])))


if __name__ == "__main__":
    main()
