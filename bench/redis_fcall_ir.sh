#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# redis_fcall_ir.sh - the instructions Redis runs for one acquire+release pair, through one
# semad on Redis (FCALL ×2) and for the Redis/Lua semaphore peer (bench_redis_peer: EVALSHA
# ×2), each on a redis-server of its own run under callgrind, in the same run. A figure that
# does not move with the machine's load, beside redis_fcall_cost.sh's times.
#
#   bench/redis_fcall_ir.sh [BUILD_DIR] [PAIRS]     (default build, 2000 pairs)
#
# With MULTI=1, also pairs one after another on one connection (bench/multi_pairs.py): on one
# semaphore, on two at once (POST /v1/acquire with semaphores), and on two at once naming a
# tenant, each on a redis-server of its own.
#
# With LIMITS=1, the same for acquires naming a tenant (4 tenants, a tenant_max that never
# binds) and on semaphores with a rate that never binds (10^9 units/s), each on a
# redis-server of its own, beside the plain pairs of the same run (docs/semantics.md: the
# limits).
#
# Only the instructions inside the script commands count (callgrind --toggle-collect on
# fcallCommand and evalShaCommand: the pairs, and semad's few calls to start and create its
# semaphore); the slowlog is off. Uncontended: 4 connections, capacity above them. Prints
# instructions per pair of each and semad's ratio to the peer.
#
# With CG_DIR=DIR, each run's callgrind output is kept as DIR/NAME.cg.out (peer, semad, ...),
# for `callgrind_annotate --inclusive=yes DIR/semad.cg.out`: where the instructions go.
#
# With WHOLE=1, all that Redis does for its clients counts, not only the scripts: reading and
# parsing their commands, running them, and what its loop does before it sleeps again (the
# replies written; --toggle-collect on readQueryFromClient and beforeSleep), but for semad's
# FUNCTION LOAD, once a connection (toggled off again inside it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
pairs=${2:-2000}
conns=4
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_init redis-fcall-ir

for x in "$build/bin/semad" "$build/bin/sema" "$build/bin/bench_redis_peer"; do
    [ -x "$x" ] || { echo "missing $x (build first)" >&2; exit 1; }
done
for x in redis-server redis-cli valgrind callgrind_annotate; do
    command -v "$x" >/dev/null || { echo "$x missing (scripts/deps.sh bench)" >&2; exit 1; }
done

toggle=(--toggle-collect=fcallCommand --toggle-collect=evalShaCommand)
what="script commands only"
if [ "${WHOLE:-0}" = 1 ]; then
    toggle=(--toggle-collect=readQueryFromClient --toggle-collect=beforeSleep
        --toggle-collect=functionLoadCommand)
    what="all Redis does for its clients"
fi

# grind NAME: a redis-server under callgrind; sets port and vpid.
grind() {
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$tmp/$1"
    valgrind --tool=callgrind --log-file="$tmp/$1/vg.log" --callgrind-out-file="$tmp/$1/cg.out" \
        "${toggle[@]}" \
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp/$1" \
        --slowlog-log-slower-than -1 >"$tmp/$1/log" 2>&1 &
    vpid=$!
    pids+=("$vpid")
    for _ in $(seq 300); do
        grep -q "Ready to accept" "$tmp/$1/log" && return 0
        sleep 0.1
    done
    echo "redis-server did not start under valgrind:" >&2
    cat "$tmp/$1/log" >&2
    exit 1
}

# ir NAME: stop the server under callgrind; print the instructions it counted.
ir() {
    redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    wait "$vpid" 2>/dev/null || true
    if [ -n "${CG_DIR:-}" ]; then
        mkdir -p "$CG_DIR"
        cp "$tmp/$1/cg.out" "$CG_DIR/$1.cg.out"
    fi
    callgrind_annotate "$tmp/$1/cg.out" 2>/dev/null |
        awk '/PROGRAM TOTALS/ && !n++ {gsub(",", "", $1); print $1}'
}

# the peer
grind peer
"$build/bin/bench_redis_peer" --redis "127.0.0.1:$port" -c "$conns" -n "$pairs" --capacity 1000 >/dev/null
ir_peer=$(ir peer)

# semad_ir NAME [SEMA_BENCH_FLAGS...]: the instructions of PAIRS pairs through one semad on a
# redis-server of its own under callgrind.
semad_ir() {
    local name=$1 spid addr
    shift
    grind "$name"
    "$build/bin/semad" --listen 127.0.0.1:0 --engine "redis://127.0.0.1:$port" \
        >"$tmp/$name.log" 2>&1 &
    spid=$!
    pids+=("$spid")
    addr=$(wait_listen "$tmp/$name.log" "$spid")
    # (semad answers 503 until it has loaded its library into Redis: slow under callgrind)
    for _ in $(seq 600); do
        python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
            "http://$addr/healthz" 2>/dev/null && break
        sleep 0.1
    done
    if [ -n "${DRIVE:-}" ]; then # (MULTI=1: pairs one after another, bench/multi_pairs.py)
        python3 "$here/multi_pairs.py" "$DRIVE" "http://$addr" "$pairs" >/dev/null
    else
        "$build/bin/sema" bench -s "http://$addr" -c "$conns" -n "$pairs" --capacity 1000 "$@" \
            >"$tmp/$name.bench" 2>&1
        # (a busy machine may make semad answer 503 while Redis, under callgrind, lags: the
        # pairs not made are not in the count, which is then low)
        if ! grep -q '^  errors: 0 ' "$tmp/$name.bench"; then
            echo "redis_fcall_ir: $name: requests failed, its figure is low:" >&2
            grep -E '^  (answers|errors):' "$tmp/$name.bench" >&2
        fi
    fi
    # semad stops while its Redis is there: stopped after it, semad would wait for Redis to
    # come back and outlive this script
    kill -TERM "$spid"
    wait "$spid" || true
    ir "$name"
}
ir_semad=$(semad_ir semad)

python3 - "$ir_peer" "$ir_semad" "$pairs" "$what" <<'EOF'
import sys
peer, semad, pairs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
print("redis instructions per pair (%s): semad %d, redis-lua peer %d"
      % (sys.argv[4], semad // pairs, peer // pairs))
print("semad_redis_ir_per_pair_vs_redis_lua %.2f" % (semad / peer))
EOF
if [ "${LIMITS:-0}" = 1 ]; then
    ir_tenants=$(semad_ir tenants --tenants 4 --tenant-max "$conns")
    ir_rate=$(semad_ir rate --sem-rate 1000000000)
    python3 - "$ir_semad" "$ir_tenants" "$ir_rate" "$pairs" <<'EOF'
import sys
plain, tenants, rate, pairs = (int(x) for x in sys.argv[1:])
for name, v in (("tenants", tenants), ("rate", rate)):
    print("redis instructions per pair with %s: %d (%.2fx plain)" % (name, v // pairs, v / plain))
EOF
fi
if [ "${MULTI:-0}" = 1 ]; then
    ir_one=$(DRIVE=plain semad_ir one)
    ir_two=$(DRIVE=multi semad_ir two)
    ir_two_tenant=$(DRIVE=tenant semad_ir two_tenant)
    python3 - "$ir_one" "$ir_two" "$ir_two_tenant" "$pairs" <<'EOF'
import sys
one, two, tenant, pairs = (int(x) for x in sys.argv[1:])
print("redis instructions per pair, one after another: on one semaphore %d, on two at once %d "
      "(%.2fx), on two at once naming a tenant %d (%.2fx)"
      % (one // pairs, two // pairs, two / one, tenant // pairs, tenant / one))
EOF
fi
