#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - semad against two Node.js peers in one run on loopback: the original semaphore service's Node-RED
# semaphore flow (the legacy routes, driven by wrk) and redis-semaphore on a real redis-server
# (acquire+release pairs), with the same concurrency. Installs the pinned npm packages into
# bench/peers/node_modules on first use, starts every process itself on ephemeral 127.0.0.1
# ports with temp dirs, interleaves the contenders round by round, prints one machine-readable
# line per figure and per ratio, and cleans up.
#
# Usage: bench/peers/run.sh [BUILD_DIR]      (default: $SEMA_BUILD_DIR or ./build)
# Environment: SECS (whole seconds per figure, default 2), ROUNDS (interleaved rounds; each
#   figure is its best round, default 2), CONNS (default 50), CONTENDED_LIMIT (capacity of the
#   contended figure, default 10; 0 skips it), SEMA_SEEDS (where 001_*.txt is, default
#   ../shared/seeds beside the repository).
# Output lines: "figure NAME key=value ...", "ratio NAME value=X goal=>=Y met=yes|no", and
#   "# ..." comments. Exit status 0 when every figure was measured, 1 otherwise.
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-${SEMA_BUILD_DIR:-build}}
SECS=${SECS:-2}
ROUNDS=${ROUNDS:-2}
CONNS=${CONNS:-50}
CONTENDED_LIMIT=${CONTENDED_LIMIT:-10}
export SEMA_SEEDS=${SEMA_SEEDS:-$root/../shared/seeds}
semad=$build/bin/semad
sema=$build/bin/sema
m() { python3 "$here/measure.py" "$@"; }

for p in "$semad" "$sema"; do
    if [ ! -x "$p" ]; then
        echo "peers: $p is missing; build first (cmake --build $build)" >&2
        exit 1
    fi
done
for c in node npm redis-server wrk python3; do
    if ! command -v "$c" >/dev/null; then
        echo "peers: $c is missing (scripts/deps.sh bench; Node.js >= 18.5 with npm)" >&2
        exit 1
    fi
done

# The pinned packages, installed once into the ignored bench/peers/node_modules.
installed() {
    # shellcheck disable=SC2016 # JavaScript, not shell.
    (cd "$here" && node -e '
const want = require("./package.json").dependencies;
for (const [n, v] of Object.entries(want))
    if (require(`${n}/package.json`).version !== v) process.exit(1);' 2>/dev/null)
}
if ! installed; then
    echo "# installing the locked npm packages (npm ci) into $here/node_modules" >&2
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
    if ! installed; then
        echo "peers: npm ci failed" >&2
        exit 1
    fi
fi

# shellcheck source=bench/lib.sh
. "$here/../lib.sh"
bench_init peers


# start NAME CMD...: starts CMD in the background; sets pid_NAME and addr_NAME.
start() {
    local name=$1 a
    shift
    "$@" >"$tmp/$name.log" 2>&1 &
    pids+=($!)
    printf -v "pid_$name" '%s' "$!"
    a=$(wait_listen "$tmp/$name.log" "$!") || exit 1
    printf -v "addr_$name" '%s' "$a"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

echo "# peers: $(nproc) cores, $CONNS connections, ${SECS}s per figure, $ROUNDS rounds," \
    "node $(node --version), $(date -u +%Y-%m-%dT%H:%M:%SZ)"

start none "$semad" --listen 127.0.0.1:0 --data "$tmp/none" --durability none
start strict "$semad" --listen 127.0.0.1:0 --data "$tmp/strict"
start nodered env TMPDIR="$tmp" node "$here/nodered.js" --check
grep -q '^routes ok' "$tmp/nodered.log" || {
    echo "peers: the Node-RED flow does not serve the legacy routes:" >&2
    cat "$tmp/nodered.log" >&2
    exit 1
}
# start_redis NAME [FLAGS...]: a redis-server in $tmp/NAME; sets pid_NAME and rport_NAME.
start_redis() {
    local name=$1 port
    shift
    port=$(free_port)
    mkdir -p "$tmp/$name"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --dir "$tmp/$name" --daemonize no \
        "$@" >"$tmp/$name.log" 2>&1 &
    pids+=($!)
    printf -v "pid_$name" '%s' "$!"
    printf -v "rport_$name" '%s' "$port"
    for _ in $(seq 50); do
        grep -q "Ready to accept" "$tmp/$name.log" && return 0
        sleep 0.1
    done
    echo "peers: redis-server $name did not start:" >&2
    cat "$tmp/$name.log" >&2
    exit 1
}
# In memory only, and with every write fsynced (the durable peer for semad's strict store).
start_redis redis --appendonly no
start_redis redis_aof --appendonly yes --appendfsync always

# The same check of the five legacy routes on semad, then the semaphore the load runs on:
# value 1000, more than the connections, so no down is refused.
for s in none strict nodered; do
    a=addr_$s
    if [ "$s" != nodered ]; then
        node "$here/legacy_check.js" "${!a}" >/dev/null || exit 1
    fi
    curl -sf -o /dev/null -X POST -H 'content-type: application/json' \
        -d '{"name":"legacy","value":1000}' "http://${!a}/semaphore" || {
        echo "peers: cannot create the legacy semaphore on $s" >&2
        exit 1
    }
done
echo "# legacy routes checked (create, up, down, value, delete) on semad none, semad strict" \
    "and the Node-RED flow"

legacy() { # NAME: wrk's GET value / POST down / POST up mix against server NAME
    local p=pid_$1 a=addr_$1
    SEMA_LEGACY_NAME=legacy m run --servers "${!p}" -- timeout 60 wrk -t1 -c "$CONNS" \
        -d "${SECS}s" --latency -s "$here/legacy.lua" "http://${!a}/"
}
pairs_semad() { # NAME: sema bench acquire+release pairs against semad NAME
    local p=pid_$1 a=addr_$1
    m run --servers "${!p}" -- timeout 60 "$sema" bench --json -s "http://${!a}" \
        -c "$CONNS" -d "${SECS}s" --name "pairs-$1-$r" "${@:2}"
}
pairs_rs() { # NAME ARGS: redis_sem.js, redis-semaphore pairs against redis-server NAME
    local p=pid_$1 rp=rport_$1
    m run --servers "${!p}" -- timeout 60 node "$here/redis_sem.js" \
        --redis "127.0.0.1:${!rp}" -c "$CONNS" -d "$SECS" "${@:2}"
}

# Warm-up, not measured: Node-RED's first second runs in V8's interpreter and costs about three
# times the CPU per request of its steady state.
for s in nodered none strict; do
    a=addr_$s
    SEMA_LEGACY_NAME=legacy timeout 30 wrk -t1 -c "$CONNS" -d 1s -s "$here/legacy.lua" \
        "http://${!a}/" >/dev/null
done

for r in $(seq "$ROUNDS"); do
    j_lnr=$(m best "${j_lnr:-}" "$(legacy nodered)")
    j_lnone=$(m best "${j_lnone:-}" "$(legacy none)")
    j_lstrict=$(m best "${j_lstrict:-}" "$(legacy strict)")
    j_rs=$(m best "${j_rs:-}" "$(pairs_rs redis)")
    j_pnone=$(m best "${j_pnone:-}" "$(pairs_semad none)")
    j_rs1=$(m best "${j_rs1:-}" "$(pairs_rs redis --shared)")
    j_pstrict=$(m best "${j_pstrict:-}" "$(pairs_semad strict)")
    j_rsaof=$(m best "${j_rsaof:-}" "$(pairs_rs redis_aof --shared)")
done
if [ "$CONTENDED_LIMIT" -gt 0 ]; then
    j_crs=$(pairs_rs redis --limit "$CONTENDED_LIMIT")
    j_cnone=$(r=c pairs_semad none --capacity "$CONTENDED_LIMIT")
fi

# Every down was answered 200 (errors=0) and was followed by its up unless wrk stopped in
# between: the value ends in [1000 - CONNS, 1000].
for s in nodered none strict; do
    a=addr_$s
    v=$(curl -s "http://${!a}/semaphore/value/legacy" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("value"))')
    if ! [ "$v" -le 1000 ] 2>/dev/null || ! [ "$v" -ge $((1000 - CONNS)) ]; then
        echo "# WARNING: $s: legacy value $v after the runs, want 1000-$CONNS..1000"
        legacy_bad=1
    fi
done

L=(requests_per_s p50_us p99_us errors server_cpu_us_per_request generator_cpu_us_per_request)
m figure legacy_nodered "$j_lnr" conns="$CONNS" "${L[@]}"
m figure legacy_semad_none "$j_lnone" conns="$CONNS" "${L[@]}"
m figure legacy_semad_strict "$j_lstrict" conns="$CONNS" "${L[@]}"
get() { m get "$1" "$2"; }
m ratio semad_none_legacy_vs_nodered "$(get "$j_lnone" requests_per_s)" "$(get "$j_lnr" requests_per_s)" 50
m ratio semad_strict_legacy_vs_nodered "$(get "$j_lstrict" requests_per_s)" "$(get "$j_lnr" requests_per_s)" 50
# Noise-robust: requests per CPU-second of the server.
m ratio semad_none_legacy_cpu_per_request_vs_nodered "$(get "$j_lnr" server_cpu_us_per_request)" "$(get "$j_lnone" server_cpu_us_per_request)" 50
m ratio semad_strict_legacy_cpu_per_request_vs_nodered "$(get "$j_lnr" server_cpu_us_per_request)" "$(get "$j_lstrict" server_cpu_us_per_request)" 50

P=(pairs_per_s requests_per_s pair_p50_us pair_p99_us errors server_cpu_us_per_request generator_cpu_us_per_request)
m figure pairs_redis_semaphore "$j_rs" conns="$CONNS" redis_connections="$CONNS" "${P[@]}" left_in_redis
m figure pairs_redis_semaphore_one_connection "$j_rs1" conns="$CONNS" redis_connections=1 "${P[@]}" left_in_redis
m figure pairs_redis_semaphore_aof_always_one_connection "$j_rsaof" conns="$CONNS" redis_connections=1 "${P[@]}" left_in_redis
# sema bench calls its pairs "ops".
as_pairs() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1] or "{}"); j.update(pairs_per_s=j.get("ops_per_s"), pair_p50_us=j.get("op_p50_us"), pair_p99_us=j.get("op_p99_us")); print(json.dumps(j))' "$1"
}
j_pnone=$(as_pairs "$j_pnone")
j_pstrict=$(as_pairs "$j_pstrict")
m figure pairs_semad_none "$j_pnone" conns="$CONNS" "${P[@]}"
m figure pairs_semad_strict "$j_pstrict" conns="$CONNS" "${P[@]}"
# The same concurrency: 50 loops, 50 connections, one request in flight on each.
m ratio semad_none_pairs_vs_redis_semaphore "$(get "$j_pnone" pairs_per_s)" "$(get "$j_rs" pairs_per_s)" 1.5
m ratio semad_strict_pairs_vs_redis_semaphore "$(get "$j_pstrict" pairs_per_s)" "$(get "$j_rs" pairs_per_s)" 1.5
# The peer's better mode: 50 loops sharing one ioredis connection (their commands pipelined).
m ratio semad_none_pairs_vs_redis_semaphore_one_connection "$(get "$j_pnone" pairs_per_s)" "$(get "$j_rs1" pairs_per_s)" 1.5
m ratio semad_strict_pairs_vs_redis_semaphore_aof_always_one_connection "$(get "$j_pstrict" pairs_per_s)" "$(get "$j_rsaof" pairs_per_s)" 1.5
# Noise-robust: pairs per CPU-second of server plus client (both send two requests per pair).
tot() { python3 -c 'import sys; print(sum(float(a or 0) for a in sys.argv[1:]))' "$@"; }
cpu() { tot "$(get "$1" server_cpu_us_per_request)" "$(get "$1" generator_cpu_us_per_request)"; }
m ratio semad_none_total_cpu_per_pair_vs_redis_semaphore "$(cpu "$j_rs")" "$(cpu "$j_pnone")" 1.5
m ratio semad_none_total_cpu_per_pair_vs_redis_semaphore_one_connection "$(cpu "$j_rs1")" "$(cpu "$j_pnone")" 1.5

if [ "$CONTENDED_LIMIT" -gt 0 ]; then
    j_cnone=$(as_pairs "$j_cnone")
    m figure pairs_contended_redis_semaphore "$j_crs" conns="$CONNS" capacity="$CONTENDED_LIMIT" retry_interval_ms "${P[@]}"
    m figure pairs_contended_semad_none "$j_cnone" conns="$CONNS" capacity="$CONTENDED_LIMIT" "${P[@]}"
    m ratio semad_none_contended_pairs_vs_redis_semaphore "$(get "$j_cnone" pairs_per_s)" "$(get "$j_crs" pairs_per_s)" 1.5
fi

# Missed goals are figures, not failures; a figure that could not be measured is one.
status=${legacy_bad:-0}
for v in "$j_lnr" "$j_lnone" "$j_lstrict" "$j_rs" "$j_rs1" "$j_rsaof" "$j_pnone" "$j_pstrict"; do
    if [ -z "$(get "$v" requests_per_s)" ] || [ "$(get "$v" exit)" != 0 ]; then
        echo "# a figure failed: $v"
        status=1
    fi
done
exit "$status"
