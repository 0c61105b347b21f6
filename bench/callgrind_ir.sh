#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# callgrind_ir.sh - user-space instructions per request of semad or of the constant-answer
# ceiling (bench_ceiling), repeatable on a noisy machine: the server runs under callgrind
# twice, for N and N/10 requests of `sema bench`, and the difference is divided by the extra
# requests, so start-up and shutdown cancel out.
#
# Usage: bench/callgrind_ir.sh BUILD semad|ceiling N [pairs|get]
#   DUR=strict|relaxed|none (semad's durability, default none); SEMAD_ARGS: more semad flags
#   (split on spaces), e.g. "--auth FILE" with SEMA_TOKEN set for sema bench; BENCH_ARGS:
#   more `sema bench` flags (split on spaces), e.g. "-k 2 --all" for acquires of 2 semaphores
# Prints: TARGET.MODE instructions_per_request=X (and per_pair for pairs)
set -euo pipefail
build=${1:?usage: callgrind_ir.sh BUILD semad|ceiling N [pairs|get]}
target=${2:?semad or ceiling}
n=${3:?number of pairs or requests}
mode=${4:-pairs}
command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init callgrind

# Run the server under callgrind for `count` requests; print its total instructions.
measure() {
    local count=$1 addr="" extra=() pid
    if [ "$target" = semad ]; then
        valgrind --tool=callgrind --log-file="$tmp/vg.log" --callgrind-out-file="$tmp/cg.$count" \
            "$build/bin/semad" --listen 127.0.0.1:0 --data "$tmp/data.$count" \
            --durability "${DUR:-none}" ${SEMAD_ARGS:-} >"$tmp/srv.$count" 2>&1 &
    else
        valgrind --tool=callgrind --log-file="$tmp/vg.log" --callgrind-out-file="$tmp/cg.$count" \
            "$build/bin/bench_ceiling" --listen 127.0.0.1:0 --max-seconds 600 \
            >"$tmp/srv.$count" 2>&1 &
        extra+=(--no-create)
    fi
    pid=$!
    addr=$(wait_listen "$tmp/srv.$count" "$pid") || exit 1
    [ "$mode" = get ] && extra+=(--path /healthz)
    timeout 600 "$build/bin/sema" bench -s "http://$addr" -m "$mode" -n "$count" -c 50 \
        "${extra[@]}" ${BENCH_ARGS:-} --json >"$tmp/bench.$count" 2>&1
    kill -TERM "$pid"
    wait "$pid" || true
    grep -q '"errors":0[,}]' "$tmp/bench.$count" ||
        { echo "sema bench had errors:" >&2; cat "$tmp/bench.$count" >&2; exit 1; }
    awk '/^(summary|totals):/ {print $2; exit}' "$tmp/cg.$count"
}

big=$(measure "$n")
small=$(measure $((n / 10)))
per=1
[ "$mode" = pairs ] && per=2
python3 - "$big" "$small" "$n" "$per" "$target.$mode" <<'PY'
import sys
big, small, n, per, tag = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
reqs = (n - n // 10) * per
line = f"{tag} instructions_per_request={(big - small) / reqs:.0f}"
if per == 2:
    line += f" per_pair={2 * (big - small) / reqs:.0f}"
print(line)
PY
