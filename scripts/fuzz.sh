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
# one target per core at a time: each is one process of its own
fuzz_one() {
    local target=$1 work=build-fuzz/work-$1
    rm -rf "$work"
    mkdir -p "$work"
    cp fuzz/corpus/$target/* "$work"/
    build-fuzz/fuzz/fuzz_$target -max_total_time="$secs" -max_len=2048 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-fuzz/crashers/ \
        "$work" 2>build-fuzz/fuzz_$target.log
}
report() {  # target status
    echo "fuzz_$1: ${secs}s from $(ls fuzz/corpus/$1 | wc -l) corpus inputs"
    if [ "$2" -ne 0 ]; then
        tail -40 build-fuzz/fuzz_$1.log
        echo "fuzz_$1: FAILED"
        return 1
    fi
    grep -E "stat::number_of_executed_units|cov:" build-fuzz/fuzz_$1.log | tail -2
}
targets=(body http path auth)
failed=0
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
    batch=("${targets[@]:i:jobs}")
    pids=()
    for t in "${batch[@]}"; do
        fuzz_one "$t" &
        pids+=($!)
    done
    for k in "${!batch[@]}"; do
        rc=0
        wait "${pids[$k]}" || rc=$?
        report "${batch[$k]}" "$rc" || failed=1
    done
    [ "$failed" -eq 0 ] || exit 1
done
echo "fuzz: every target ran ${secs}s and found nothing"
