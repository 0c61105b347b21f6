#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# soak_proof.sh - the short soak's verdict is about semad, not the machine, shown both ways in
# one run of about nine minutes: three short soaks as `make bench` runs them (eight minutes
# of the mix at 500 operations a second, warm-up five, judged beside a fresh semad: bench/soak
# --reference) at once, beside two CPU hogs that come and go (A busy 40 s of every 60, B 30 s
# of every 60, a quarter out of step): one of a healthy semad, which must pass; one of a semad
# that leaks 64 bytes per answer, which must fail on its memory; one of a semad whose every
# answer costs 3 µs more CPU per minute it has run, which must fail on its p99 or CPU per
# operation. The faults are tests/fault/soak_fault.c, preloaded into the soaked semad alone.
#
# Usage: bench/soak_proof.sh [BUILD_DIR]   (default: $SEMA_BUILD_DIR or ./build)
# Environment: MINUTES (default 8), ENGINE (embedded or redis, default embedded), OUT (a
#   directory to keep each soak's log and --json in; default: none kept).
# Output: each soak's checks, then "proof ok" (exit 0) or "proof FAILED: ..." (exit 1).
# The hogs run at this script's niceness: `nice -n 10 bench/soak_proof.sh` keeps all of it
# below the other work of a shared machine.
set -u

build=$(cd "${1:-${SEMA_BUILD_DIR:-build}}" && pwd)
MINUTES=${MINUTES:-8}
ENGINE=${ENGINE:-embedded}
here=$(cd "$(dirname "$0")" && pwd)
shim=$build/tests/sema_soak_fault.so
[ -f "$shim" ] || { echo "soak_proof: $shim is missing; build first" >&2; exit 1; }

# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_init soak-proof

# hog_cycle SECONDS: the two hogs, on and off, for SECONDS; each stopped by its PID.
hog_cycle() {
    local a='' b='' t=0
    trap '[ -n "$a" ] && kill "$a"; [ -n "$b" ] && kill "$b"; exit 0' TERM
    while [ "$t" -lt "$1" ]; do
        if [ $((t % 60)) -lt 40 ]; then
            [ -n "$a" ] || { bash -c 'while :; do :; done' & a=$!; }
        elif [ -n "$a" ]; then
            kill "$a"; a=''
        fi
        if [ $(((t + 15) % 60)) -lt 30 ]; then
            [ -n "$b" ] || { bash -c 'while :; do :; done' & b=$!; }
        elif [ -n "$b" ]; then
            kill "$b"; b=''
        fi
        sleep 1
        t=$((t + 1))
    done
    [ -n "$a" ] && kill "$a"
    [ -n "$b" ] && kill "$b"
}

soak() { # NAME [--target-env K=V...]
    local name=$1
    shift
    "$here/soak" "$build" --engine "$ENGINE" --minutes "$MINUTES" --rate 500 --sample-s 15 \
        --warmup-min "$(python3 -c "print(min(5, $MINUTES * 5 / 8))")" --reference \
        --json "$tmp/$name.json" "$@" >"$tmp/$name.log" 2>&1
    echo $? >"$tmp/$name.rc"
}

hog_cycle $((MINUTES * 60 + 60)) &
pids+=($!)
soak healthy &
p1=$!
soak leak --target-env "LD_PRELOAD=$shim" --target-env SEMA_FAULT_LEAK_BYTES=64 &
p2=$!
soak slow --target-env "LD_PRELOAD=$shim" --target-env SEMA_FAULT_SLOW_US_PER_MIN=3 &
p3=$!
pids+=("$p1" "$p2" "$p3")
wait "$p1" "$p2" "$p3"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

# verdict NAME: its exit status and the checks that failed (a space-separated list)
verdict() {
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join(c["what"] for c in d["checks"] if not c["ok"]))' "$tmp/$1.json" 2>/dev/null
}

if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" && cp "$tmp"/*.log "$tmp"/*.json "$OUT"/
fi
bad=()
for name in healthy leak slow; do
    echo "== $name (exit $(cat "$tmp/$name.rc"))"
    grep -E '^  (ok|FAIL) |^soak: ' "$tmp/$name.log"
done
[ "$(cat "$tmp/healthy.rc")" = 0 ] || bad+=("the healthy semad failed: $(verdict healthy)")
case " $(verdict leak) " in
*" rss_kib "*) ;;
*) bad+=("the leak was not caught: $(verdict leak)") ;;
esac
case " $(verdict slow) " in
*" cpu_per_op "* | *" p99 "*) ;;
*) bad+=("the slowdown was not caught: $(verdict slow)") ;;
esac
if [ ${#bad[@]} -eq 0 ]; then
    echo "proof ok: the healthy semad passed beside the hogs; the leak and the slowdown failed"
    exit 0
fi
printf 'proof FAILED: %s\n' "${bad[@]}"
exit 1
