#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# redis_fcall_cost.sh - the time Redis itself spends on one acquire and one release: through
# one semad on Redis (one FCALL each), and for the Redis/Lua semaphore peer
# (bench_redis_peer: one EVALSHA each), on one redis-server of its own, in the same run.
#
#   bench/redis_fcall_cost.sh [BUILD_DIR] [PAIRS]     (default build, 20000 pairs)
#
# Uncontended: 4 connections, capacity above them, so nothing parks. Redis times every
# command (SLOWLOG with a 0 µs threshold: the time inside the command, not the network);
# the figures are the mean µs per call of each operation, per acquire+release pair, and
# semad's ratio to the peer. INFO commandstats' usec_per_call for fcall and evalsha is
# printed too, and semad's own CPU time per pair (user+sys from /proc). Then both run again
# with the slowlog off (it logs the commands a script runs too, inside the script's time) and
# INFO commandstats gives their µs per pair without it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
pairs=${2:-20000}
conns=4
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_init redis-fcall-cost

semad=$build/bin/semad
sema=$build/bin/sema
peer=$build/bin/bench_redis_peer
for x in "$semad" "$sema" "$peer"; do
    [ -x "$x" ] || { echo "missing $x (build first)" >&2; exit 1; }
done
command -v redis-server >/dev/null || { echo "redis-server missing (scripts/deps.sh bench)" >&2; exit 1; }

rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
    --slowlog-log-slower-than 0 --slowlog-max-len 1000000 --logfile "$tmp/redis.log" &
pids+=($!)
rcli() { redis-cli -p "$rport" "$@"; }
for _ in $(seq 100); do
    [ "$(rcli PING 2>/dev/null)" = PONG ] && break
    sleep 0.1
done

# cost LABEL COMMAND: mean µs per call of each operation from the slowlog (the op is the
# 5th argument of an FCALL; the peer's two scripts are told apart by their argument count).
cost() {
    rcli --json SLOWLOG GET 1000000 >"$tmp/slowlog.json"
    rcli INFO commandstats >"$tmp/stats.txt"
    python3 - "$1" "$tmp/slowlog.json" "$tmp/stats.txt" <<'EOF'
import json, re, sys
label, log, stats = sys.argv[1], json.loads(open(sys.argv[2], encoding="utf-8", errors="replace").read()), open(sys.argv[3]).read()
ops = {}
for e in log:
    us, args = e[2], e[3]
    cmd = args[0].lower()
    if cmd == "fcall":
        op = args[4]
    elif cmd == "evalsha":
        op = "acquire" if len(args) > 5 else "release"
    else:
        continue
    n, t = ops.get(op, (0, 0))
    ops[op] = (n + 1, t + us)
out = {"label": label}
for op, (n, t) in sorted(ops.items()):
    out[op] = {"calls": n, "us_per_call": round(t / n, 2)}
for m in re.finditer(r"cmdstat_(fcall|evalsha):calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)", stats):
    out["commandstats_" + m.group(1)] = {"calls": int(m.group(2)), "usec_per_call": float(m.group(4))}
acq, rel = ops.get("acquire", (1, 0)), ops.get("lease_release", ops.get("release", (1, 0)))
out["us_per_pair"] = round(acq[1] / acq[0] + rel[1] / rel[0], 2)
print(json.dumps(out))
EOF
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# the peer
rcli CONFIG RESETSTAT >/dev/null
rcli SLOWLOG RESET >/dev/null
"$peer" --redis "127.0.0.1:$rport" -c "$conns" -n "$pairs" --capacity 1000 >"$tmp/peer.txt"
j_peer=$(cost peer)
rcli FLUSHALL >/dev/null

# semad on the same Redis
"$semad" --listen 127.0.0.1:0 --engine "redis://127.0.0.1:$rport" >"$tmp/semad.log" 2>&1 &
spid=$!
pids+=("$spid")
addr=$(wait_listen "$tmp/semad.log" "$spid")
"$sema" bench -s "http://$addr" -c "$conns" -n 1000 --capacity 1000 >/dev/null # warm up
rcli CONFIG RESETSTAT >/dev/null
rcli SLOWLOG RESET >/dev/null
t0=$(cpu_ticks "$spid")
"$sema" bench -s "http://$addr" -c "$conns" -n "$pairs" --capacity 1000 --no-create --json >"$tmp/semad.json"
t1=$(cpu_ticks "$spid")
j_semad=$(cost semad)

# Both again with the slowlog off: Redis 7 logs every command a script runs as well, inside
# the script's time, which weighs on a script by its number of commands. INFO commandstats
# times the calls the same way without it (µs per pair: two calls).
plain() {
    rcli INFO commandstats | python3 -c '
import re, sys
m = re.search(r"cmdstat_%s:calls=(\d+),usec=(\d+)" % sys.argv[1], sys.stdin.read())
print(round(2 * int(m.group(2)) / int(m.group(1)), 2))' "$1"
}
rcli CONFIG SET slowlog-log-slower-than -1 >/dev/null
rcli CONFIG RESETSTAT >/dev/null
"$sema" bench -s "http://$addr" -c "$conns" -n "$pairs" --capacity 1000 --no-create >/dev/null
p_semad=$(plain fcall)
# (semad stops while its Redis is there: stopped after it, it would wait for Redis to come
# back and outlive this script)
kill -TERM "$spid"
wait "$spid" || true
rcli CONFIG RESETSTAT >/dev/null
"$peer" --redis "127.0.0.1:$rport" -c "$conns" -n "$pairs" --capacity 1000 >/dev/null
p_peer=$(plain evalsha)

echo "$j_peer"
echo "$j_semad"
python3 - "$j_peer" "$j_semad" "$((t1 - t0))" "$(getconf CLK_TCK)" "$pairs" "$p_semad" "$p_peer" <<'EOF'
import json, sys
peer, semad = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ticks, hz, pairs = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
p_semad, p_peer = float(sys.argv[6]), float(sys.argv[7])
print("redis time per pair: semad %.1f us (acquire %.1f, release %.1f), redis-lua peer %.1f us "
      "(acquire %.1f, release %.1f)" % (
          semad["us_per_pair"], semad["acquire"]["us_per_call"],
          semad["lease_release"]["us_per_call"], peer["us_per_pair"],
          peer["acquire"]["us_per_call"], peer["release"]["us_per_call"]))
print("semad_redis_us_per_pair_vs_redis_lua %.2f" % (semad["us_per_pair"] / peer["us_per_pair"]))
print("semad_cpu_us_per_pair %.1f" % (ticks * 1e6 / hz / pairs))
print("slowlog off (commandstats): semad %.1f us per pair, redis-lua peer %.1f us" % (p_semad, p_peer))
print("semad_redis_us_per_pair_vs_redis_lua_slowlog_off %.2f" % (p_semad / p_peer))
EOF
