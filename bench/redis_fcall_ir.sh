#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# redis_fcall_ir.sh - the instructions Redis runs for one acquire+release pair, through one
# semad on Redis (FCALL ×2) and for the Redis/Lua semaphore peer (bench_redis_peer: EVALSHA
# ×2), each on a redis-server of its own run under callgrind, in the same run. A figure that
# does not move with the machine's load, beside redis_fcall_cost.sh's times.
#
#   bench/redis_fcall_ir.sh [BUILD_DIR] [PAIRS]     (default build, 2000 pairs)
#
# Only the instructions inside the script commands count (callgrind --toggle-collect on
# fcallCommand and evalShaCommand: the pairs, and semad's few calls to start and create its
# semaphore); the slowlog is off. Uncontended: 4 connections, capacity above them. Prints
# instructions per pair of each and semad's ratio to the peer.
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

# grind NAME: a redis-server under callgrind; sets port and vpid.
grind() {
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$tmp/$1"
    valgrind --tool=callgrind --log-file="$tmp/$1/vg.log" --callgrind-out-file="$tmp/$1/cg.out" \
        --toggle-collect=fcallCommand --toggle-collect=evalShaCommand \
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
    callgrind_annotate "$tmp/$1/cg.out" 2>/dev/null |
        awk '/PROGRAM TOTALS/ && !n++ {gsub(",", "", $1); print $1}'
}

# the peer
grind peer
"$build/bin/bench_redis_peer" --redis "127.0.0.1:$port" -c "$conns" -n "$pairs" --capacity 1000 >/dev/null
ir_peer=$(ir peer)

# semad
grind semad
"$build/bin/semad" --listen 127.0.0.1:0 --engine "redis://127.0.0.1:$port" >"$tmp/semad.log" 2>&1 &
spid=$!
pids+=("$spid")
addr=$(wait_listen "$tmp/semad.log" "$spid")
# ready once its library is loaded, which under callgrind on a busy machine takes seconds
for _ in $(seq 600); do
    grep -q ' ready (' "$tmp/semad.log" && break
    sleep 0.1
done
"$build/bin/sema" bench -s "http://$addr" -c "$conns" -n "$pairs" --capacity 1000 >/dev/null
# semad stops while its Redis is there: stopped after it, semad would wait for Redis to come
# back and outlive this script
kill -TERM "$spid"
wait "$spid" || true
ir_semad=$(ir semad)

python3 - "$ir_peer" "$ir_semad" "$pairs" <<'EOF'
import sys
peer, semad, pairs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
print("redis instructions per pair (script commands only): semad %d, redis-lua peer %d"
      % (semad // pairs, peer // pairs))
print("semad_redis_ir_per_pair_vs_redis_lua %.2f" % (semad / peer))
EOF
