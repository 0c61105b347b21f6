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
# The durability modes beside Redis with and without fsync (about a minute).
if [ -x "$build/bin/bench_redis_peer" ] && command -v redis-server >/dev/null; then
    echo "== durability_vs_redis"
    "$(dirname "$0")/../bench/durability_vs_redis.sh" "$build" || status=1
fi
exit $status
