#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""redis_cluster.py - semad on a Redis Cluster of three primaries beside semad on one
redis-server, in one run: how the Redis work spreads over the primaries, and what one hot
semaphore gets. Starts everything itself on ephemeral loopback ports (the cluster without
replicas, so that only primaries use the machine's cores; two semad instances on each) and
stops it at the end. Prints one line per figure ("figure NAME key=value ...") and per ratio.

For each back end, `sema bench -s A -s B -c CONNS -d SECS` through both instances, on K
semaphores (-k; K=1: one hot semaphore; K=SPREAD: connection i on semaphore i mod K, so at most
CONNS of them are busy), ROUNDS interleaved rounds, best of each: pairs/s, Redis CPU per pair (every primary's, from INFO cpu), script calls (FCALL) per
pair, MOVED and ASK answers per 10,000 pairs (INFO errorstats; goal 0), and on the cluster each primary's share of the script calls and of the Redis CPU. One
semaphore lives on one primary: its share of the work is all of it (the hot-limit), while many
semaphores spread over the three.

Usage: bench/redis_cluster.py [BUILD_DIR]     (default: $SEMA_BUILD_DIR or ./build)
Environment: SECS (default 3), ROUNDS (default 3), CONNS (default 60), SPREAD (default: CONNS,
a semaphore of its own per connection). Pairs/s on a busy machine move with its load: the
shares of the work and Redis's CPU per pair are the steadier figures.
"""
import json
import os
import subprocess
import sys

from bench_env import BUILD, ROOT  # noqa: E402,F401 (the build, the fixtures' path)
import redis_cluster_fixture as cf  # noqa: E402
import redis_fixture as rf  # noqa: E402

SECS = float(os.environ.get("SECS", "3"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
CONNS = int(os.environ.get("CONNS", "60"))
SPREAD = int(os.environ.get("SPREAD", str(CONNS)))
SEMA = os.path.join(BUILD, "bin", "sema")


def say(*words):
    print(" ".join(str(w) for w in words), flush=True)


class One:
    """One redis-server, as the cluster's peer: the same questions."""

    def __init__(self):
        self.r = rf.RedisServer()

    def url(self):
        return self.r.url()

    def cpu(self):
        i = self.r.info("cpu")
        return {self.r.port: float(i["used_cpu_user"]) + float(i["used_cpu_sys"])}

    def calls(self):
        return {self.r.port: self.r.commandstats().get("fcall", 0)}

    def redirects(self):
        return redirects([self.r])

    def close(self):
        self.r.close()


class Clu:
    def __init__(self):
        self.c = cf.Cluster(3, 0)

    def url(self):
        return "redis+cluster://" + self.c.seeds()

    def cpu(self):
        return self.c.cpu_seconds()

    def calls(self):
        return self.c.calls()

    def redirects(self):
        return redirects(self.c.primaries())

    def close(self):
        self.c.close()


def redirects(nodes):
    """MOVED and ASK answers of these nodes so far (INFO errorstats)."""
    n = 0
    for node in nodes:
        st = node.info("errorstats")
        for k in ("errorstat_MOVED", "errorstat_ASK"):
            n += int(st.get(k, "count=0").split("=", 1)[1].split(",")[0])
    return n


def diff(a, b):
    return {k: b[k] - a.get(k, 0) for k in b}


def run(be, fl, k, name):
    ua, ub = ["http://127.0.0.1:%d" % s.port for s in (fl[0], fl[1])]
    c0, f0, r0 = be.cpu(), be.calls(), be.redirects()
    p = subprocess.run([SEMA, "bench", "-s", ua, "-s", ub, "-c", str(CONNS), "-d",
                        "%gs" % SECS, "-k", str(k), "--name", name, "--json"],
                       capture_output=True, timeout=600)
    line = next((l for l in p.stdout.decode().splitlines() if l.startswith("{")), None)
    if p.returncode != 0 or line is None:
        raise RuntimeError("sema bench failed: %s %s" % (p.stdout[-300:], p.stderr[-800:]))
    j = json.loads(line)
    cpu, calls = diff(c0, be.cpu()), diff(f0, be.calls())
    pairs = max(1, j["ops"])
    return {"pairs_per_s": j.get("pairs_per_s", j.get("ops_per_s")), "errors": j.get("errors", 0),
            "redis_cpu_us_per_pair": round(sum(cpu.values()) * 1e6 / pairs, 2),
            "fcalls_per_pair": round(sum(calls.values()) / pairs, 3),
            "redirects_per_10k": round((be.redirects() - r0) * 10000 / pairs, 2),
            "top_cpu_share": round(max(cpu.values()) / max(1e-9, sum(cpu.values())), 3),
            "top_calls_share": round(max(calls.values()) / max(1, sum(calls.values())), 3),
            "cpu_shares": ",".join("%.2f" % (v / max(1e-9, sum(cpu.values())))
                                   for v in sorted(cpu.values(), reverse=True))}


def main():
    if not rf.redis_engine_built():
        sys.exit("redis_cluster: this semad has no Redis back end")
    cf.need_cluster_tools()
    say("# redis_cluster: %d cores, %d connections, %.1fs per run, %d rounds, spread over %d"
        % (os.cpu_count(), CONNS, SECS, ROUNDS, SPREAD))
    res = {}
    for label, make in (("one_redis", One), ("cluster_3_primaries", Clu)):
        be = make()
        try:
            with rf.Fleet(be.url(), 2, durability="none") as fl:
                for _ in range(ROUNDS):
                    for k, tag in ((1, "hot"), (SPREAD, "spread")):
                        j = run(be, fl, k, tag)
                        key = "%s_%s" % (label, tag)
                        if key not in res or j["pairs_per_s"] > res[key]["pairs_per_s"]:
                            res[key] = j
        finally:
            be.close()
    for key, j in res.items():
        say("figure redis_cluster_%s conns=%d %s" % (
            key, CONNS, " ".join("%s=%s" % kv for kv in j.items())))
    for tag in ("hot", "spread"):
        a, b = res["one_redis_" + tag], res["cluster_3_primaries_" + tag]
        say("ratio redis_cluster_%s_pairs_vs_one_redis value=%.3f" % (
            tag, b["pairs_per_s"] / max(1e-9, a["pairs_per_s"])))
        say("ratio redis_cluster_%s_redis_cpu_per_pair_vs_one_redis value=%.3f (lower is better)"
            % (tag, b["redis_cpu_us_per_pair"] / max(1e-9, a["redis_cpu_us_per_pair"])))


if __name__ == "__main__":
    main()
