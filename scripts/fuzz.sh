#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fuzz.sh - build the libFuzzer targets (clang, ASan+UBSan, build-fuzz/) and fuzz each one
# for a bounded time from a copy of its corpus (fuzz/README.md). Exits non-zero when a target
# finds a crash, a leak or a broken invariant; the input is left in build-fuzz/crashers/.
#
# Usage: scripts/fuzz.sh [SECONDS per target, default 60]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
jobs=$(nproc 2>/dev/null || echo 2)

CC=clang cmake -S . -B build-fuzz -DSEMA_BUILD_FUZZ=ON -DSEMA_BUILD_TESTS=OFF \
    -DSEMA_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$jobs" --target fuzz_body fuzz_http fuzz_path fuzz_auth >/dev/null

mkdir -p build-fuzz/crashers
for target in body http path auth; do
    work=build-fuzz/work-$target
    rm -rf "$work"
    mkdir -p "$work"
    cp fuzz/corpus/$target/* "$work"/
    echo "fuzz_$target: ${secs}s from $(ls "$work" | wc -l) corpus inputs"
    build-fuzz/fuzz/fuzz_$target -max_total_time="$secs" -max_len=2048 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-fuzz/crashers/ \
        "$work" 2>build-fuzz/fuzz_$target.log ||
        { tail -40 build-fuzz/fuzz_$target.log; echo "fuzz_$target: FAILED"; exit 1; }
    grep -E "stat::number_of_executed_units|cov:" build-fuzz/fuzz_$target.log | tail -2
done
echo "fuzz: every target ran ${secs}s and found nothing"
