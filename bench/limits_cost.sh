#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# limits_cost.sh - what semad's limits cost beside the plain acquire, in one run: acquire+
# release pairs/s on plain semaphores, with tenants (each connection names one of TENANTS,
# the semaphores capped per tenant above what anyone asks), with a rate that does not bind,
# and with every acquire taking 2 semaphores at once (POST /v1/acquire), interleaved over
# ROUNDS rounds (each figure is its best round), with semad's CPU time per request; then
# semad's user-space instructions per request of each under callgrind (repeatable where
# wall time is not). Starts its own semad on an ephemeral 127.0.0.1 port.
#
# Usage: bench/limits_cost.sh [BUILD_DIR]      (default: $SEMA_BUILD_DIR or ./build)
# Environment: SECS (seconds per run, default 2), ROUNDS (default 5), CONNS (default 50),
#   TENANTS (default 4), IR (pairs for the callgrind figures, default 20000; 0 or no
#   valgrind skips them), REDIS (1: semad on a redis-server of its own, without the
#   2-semaphore variant, which Redis does not serve yet, nor semad's instructions: Redis's
#   are bench/redis_fcall_ir.sh's, LIMITS=1).
# Output lines: "figure NAME key=value ..." and "ratio NAME value=X".
set -u

build=${1:-${SEMA_BUILD_DIR:-build}}
SECS=${SECS:-2}
ROUNDS=${ROUNDS:-5}
CONNS=${CONNS:-50}
TENANTS=${TENANTS:-4}
semad=$build/bin/semad
sema=$build/bin/sema
for p in "$semad" "$sema"; do
    [ -x "$p" ] || { echo "limits_cost: $p is missing; build first" >&2; exit 1; }
done

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init limits

engine=(--durability none)
variants=(plain tenants rate multi2)
if [ "${REDIS:-0}" = 1 ]; then
    start_redis lim || exit 1
    # shellcheck disable=SC2154 # set by start_redis
    engine=(--engine "redis://127.0.0.1:$rport_lim")
    variants=(plain tenants rate)
    IR=0
fi
"$semad" --listen 127.0.0.1:0 "${engine[@]}" --max-connections 30000 >"$tmp/semad.log" 2>&1 &
pid=$!
pids+=("$pid")
addr=$(wait_listen "$tmp/semad.log" "$pid") || exit 1
# (on Redis, semad answers 503 until it has loaded its library there)
for _ in $(seq 100); do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
        "http://$addr/healthz" 2>/dev/null && break
    sleep 0.1
done

# The variants (above): NAME and the sema bench flags that make it (each on semaphores of its
# own; a rate of 10^9 units/s and a cap per tenant of every connection's units never bind).
# shellcheck disable=SC2034 # read as ${!f}
flags_plain=""
# shellcheck disable=SC2034
flags_tenants="--tenants $TENANTS --tenant-max $CONNS"
# shellcheck disable=SC2034
flags_rate="--sem-rate 1000000000"
# shellcheck disable=SC2034
flags_multi2="-k 2 --all"

# run NAME: one sema bench run of a variant, with semad's CPU microseconds per request.
run() {
    local f="flags_$1"
    # shellcheck disable=SC2086 # the flags are words
    bench_cpu "$pid" timeout 120 "$sema" bench --json -s "http://$addr" -c "$CONNS" \
        -d "${SECS}s" --name "lim-$1" ${!f} 2>>"$tmp/bench.err"
}

echo "# limits_cost: ${engine[*]}, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $CONNS connections," \
    "${SECS}s x $ROUNDS rounds, $TENANTS tenants, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
declare -A best_j
for _ in $(seq "$ROUNDS"); do
    for v in "${variants[@]}"; do
        best_j[$v]=$(best_pairs "${best_j[$v]:-}" "$(run "$v")")
    done
done
errors=0
for v in "${variants[@]}"; do
    j=${best_j[$v]}
    echo "figure pairs_$v conns=$CONNS pairs_per_s=$(jget "$j" ops_per_s)" \
        "p50_us=$(jget "$j" p50_us) p99_us=$(jget "$j" p99_us) errors=$(jget "$j" errors)" \
        "server_cpu_us_per_request=$(jget "$j" server_cpu_us_per_request)"
    [ "$(jget "$j" errors)" = "0" ] || errors=1
done
python3 - "${best_j[plain]}" "${best_j[tenants]}" "${best_j[rate]}" "${best_j[multi2]:-}" <<'PY'
import json, sys
p, *others = (json.loads(x or "{}") for x in sys.argv[1:])
def r(n, d):
    return n / d if n and d else 0.0
for name, o in zip(("tenants", "rate", "multi2"), others):
    if not o:
        continue
    print("ratio pairs_%s_vs_plain value=%.3f cpu_per_request=%.3f"
          % (name, r(o.get("ops_per_s"), p.get("ops_per_s")),
             r(o.get("server_cpu_us_per_request"), p.get("server_cpu_us_per_request"))))
PY
# Instructions per request, under callgrind (each variant in a semad of its own).
IR=${IR:-20000}
if [ "$IR" -gt 0 ] && command -v valgrind >/dev/null; then
    declare -A ir
    for v in "${variants[@]}"; do
        f="flags_$v"
        ir[$v]=$(BENCH_ARGS="--name lim-$v ${!f}" \
            bash "$(dirname "$0")/callgrind_ir.sh" "$build" semad "$IR" pairs) || exit 1
        echo "figure ir_$v ${ir[$v]#* }"
    done
    python3 - "${ir[plain]}" "${ir[tenants]}" "${ir[rate]}" "${ir[multi2]}" <<'PY'
import re, sys
p, *o = (float(re.search(r"instructions_per_request=(\d+)", x).group(1)) for x in sys.argv[1:])
for name, v in zip(("tenants", "rate", "multi2"), o):
    print("ratio instructions_per_request_%s_vs_plain value=%.3f extra=%.0f" % (name, v / p, v - p))
PY
fi
if [ "$errors" != 0 ]; then
    echo "limits_cost: a run had errors: $(tail -5 "$tmp/bench.err")" >&2
    exit 1
fi
