#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""redis_cluster_list.py - what a page of GET /v1/semaphores costs Redis on a Redis Cluster of
three primaries, beside one redis-server holding the same semaphores, in one run. Starts
everything itself on ephemeral loopback ports (no persistence, no replicas; one semad instance
on each) and stops it at the end.

For each store: SEMS semaphores made, then PAGES pages of 100 (at cursors spread over the
names), PAGES pages that match nothing (prefix "zzz": what looking at every slot costs alone),
and PAGES GETs of one semaphore; Redis's CPU for each, from INFO commandstats (the usec of
FCALL, summed over the primaries). Prints one "figure" line per store and "ratio" lines:
a page on the cluster against a page on one Redis, and against a GET on the cluster.

Usage: bench/redis_cluster_list.py [BUILD_DIR]   (default: $SEMA_BUILD_DIR or ./build)
Environment: SEMS (default 1000), PAGES (default 40).
"""
import os

from bench_env import BUILD, ROOT  # noqa: E402,F401 (the build, the fixtures' path)
import redis_cluster_fixture as cf  # noqa: E402
import redis_fixture as rf  # noqa: E402

SEMS = int(os.environ.get("SEMS", "1000"))
PAGES = int(os.environ.get("PAGES", "40"))


def fcall_usec(nodes):
    total = 0
    for n in nodes:
        v = n.info("commandstats").get("cmdstat_fcall", "usec=0")
        total += int(v.split("usec=", 1)[1].split(",", 1)[0])
    return total


def measure(url, nodes):
    """{what: Redis usec per request} for one store."""
    with rf.Fleet(url, 1, "--max-semaphores", str(SEMS + 10), durability="none") as f:
        s = f[0]
        for i in range(SEMS):
            st, body = s.json("PUT", "/v1/semaphores/s%05d" % i, {"capacity": 2})
            assert st in (200, 201), body
        out = {}
        for what, paths in (
                ("page", ["/v1/semaphores?limit=100&cursor=s%05d" % (i * 17 % SEMS)
                          for i in range(PAGES)]),
                ("empty_page", ["/v1/semaphores?prefix=zzz"] * PAGES),
                ("get", ["/v1/semaphores/s%05d" % i for i in range(PAGES)])):
            u = fcall_usec(nodes)
            for p in paths:
                st, body = s.json("GET", p, timeout=60)
                assert st == 200, body
                if what == "page":
                    assert len(body["semaphores"]) == min(100, SEMS - int(p[-5:]) - 1), p
            out[what] = (fcall_usec(nodes) - u) / len(paths)
        return out


def main():
    load = open("/proc/loadavg").read().split()[0]
    with rf.RedisServer() as r:
        one = measure(r.url(), [r])
    with cf.Cluster(3, 0) as c:
        clu = measure("redis+cluster://" + c.seeds(), c.primaries())
    for name, m in (("one_redis", one), ("cluster3", clu)):
        print("figure list_cost store=%s sems=%d page_us=%.0f empty_page_us=%.0f get_us=%.1f "
              "loadavg=%s" % (name, SEMS, m["page"], m["empty_page"], m["get"], load), flush=True)
    print("ratio list_page_cluster3_vs_one_redis value=%.1f" % (clu["page"] / one["page"]))
    print("ratio list_page_vs_get_on_cluster3 value=%.0f" % (clu["page"] / clu["get"]))


if __name__ == "__main__":
    main()
