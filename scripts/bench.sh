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
exit $status
