#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench.sh - run every benchmark program; each prints its figures and ratios.
set -eu
build=${1:-build}
status=0
for b in "$build"/bin/bench_*; do
    [ -x "$b" ] || continue
    echo "== $(basename "$b")"
    "$b" || status=1
done
# semad side by side with its peers (starts its own servers; about a minute).
if [ -x "$build/bin/semad" ] && [ -x "$build/bin/sema" ]; then
    echo "== semad_vs_peers"
    "$(dirname "$0")/../bench/semad_vs_peers.sh" "$build" || status=1
    # HTTPS against plain HTTP, same generator (about 30 s; needs the openssl command).
    echo "== tls_vs_plain"
    "$(dirname "$0")/../bench/tls_vs_plain.sh" "$build" || status=1
fi
# The soak, short: eight minutes of the mix at 500 operations a second on each engine, the
# checks of the long runs (docs/performance.md, "Soak"): memory, disk and latency flat after
# a warm-up of five (at this rate the records of ended leases and SQLite's log fill in four).
# Latency, CPU per operation, gauges and missed starts of the last two minutes are judged
# beside a fresh semad driven the same way in the same minutes (--reference), so that a
# neighbour's load that comes and goes does not decide the verdict.
if [ -x "$build/bin/semad" ] && [ -x "$build/bin/sema" ]; then
    echo "== soak (embedded, strict)"
    "$(dirname "$0")/../bench/soak" "$build" --minutes 8 --rate 500 --sample-s 15 --warmup-min 5 \
        --reference || status=1
    if command -v redis-server >/dev/null; then
        echo "== soak (redis)"
        "$(dirname "$0")/../bench/soak" "$build" --engine redis --minutes 8 --rate 500 \
            --sample-s 15 --warmup-min 5 --reference || status=1
    fi
fi
# The durability modes beside Redis with and without fsync (about a minute).
if [ -x "$build/bin/bench_redis_peer" ] && command -v redis-server >/dev/null; then
    echo "== durability_vs_redis"
    "$(dirname "$0")/../bench/durability_vs_redis.sh" "$build" || status=1
fi
exit $status
