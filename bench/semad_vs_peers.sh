#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# semad_vs_peers.sh - semad side by side with its peers, in one run on loopback: a bare
# libuv+llhttp server answering with constants (the ceiling), a Redis/Lua semaphore on a real
# redis-server, and wrk. Starts every process itself on ephemeral 127.0.0.1 ports with temp
# dirs, prints one machine-readable line per figure and per ratio, and cleans up.
#
# Usage: bench/semad_vs_peers.sh [BUILD_DIR]      (default: $SEMA_BUILD_DIR or ./build)
# Environment: SECS (seconds per throughput run, default 1.5), ROUNDS (interleaved rounds, the
#   best of which is reported, default 4), CONNS (default 50),
#   WAITERS (parked waiters, default 10000), IDLE (idle semaphores, default 1000000; 0 skips),
#   HANDOFFS (hand-off rounds, default 5000).
# Output lines: "figure NAME key=value ..." and "ratio NAME value=X goal=Y met=yes|no".
set -u

build=${1:-${SEMA_BUILD_DIR:-build}}
SECS=${SECS:-1.5}
ROUNDS=${ROUNDS:-4}
CONNS=${CONNS:-50}
WAITERS=${WAITERS:-10000}
IDLE=${IDLE:-1000000}
HANDOFFS=${HANDOFFS:-5000}

semad=$build/bin/semad
sema=$build/bin/sema
ceiling=$build/bin/bench_ceiling
redis_peer=$build/bin/bench_redis_peer
for p in "$semad" "$sema" "$ceiling"; do
    if [ ! -x "$p" ]; then
        echo "semad_vs_peers: $p is missing; build first (cmake --build $build)" >&2
        exit 1
    fi
done

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init bench

# Parked waiters need a descriptor each, in semad and in the generator.
ulimit -n "$(ulimit -Hn)" 2>/dev/null


# start_semad NAME [FLAGS...]: starts semad; sets addr_NAME and pid_NAME.
start_semad() {
    local name=$1
    shift
    mkdir -p "$tmp/$name"
    "$semad" --listen 127.0.0.1:0 --data "$tmp/$name/data" --max-connections 30000 \
        --max-connections-per-ip 0 "$@" \
        >"$tmp/$name/log" 2>&1 &
    pids+=($!)
    printf -v "pid_$name" '%s' "$!"
    local a
    a=$(wait_listen "$tmp/$name/log") || exit 1
    printf -v "addr_$name" '%s' "$a"
}

# A JSON field of a one-line JSON text (stdlib python3).
ratio() { # name numerator denominator goal(min ratio)
    python3 - "$@" <<'EOF'
import sys
name, num, den, goal = sys.argv[1], float(sys.argv[2] or 0), float(sys.argv[3] or 0), float(sys.argv[4])
v = num / den if den > 0 else 0.0
print(f"ratio {name} value={v:.3f} goal=>={goal:g} met={'yes' if v >= goal else 'no'}")
EOF
}

goal() { # name value op(<, <=) limit [count want]: an absolute goal, with a completeness check
    python3 - "$@" <<'EOF'
import sys
a = sys.argv[1:] + ["0", "0"]
name, v, op, lim, n, want = a[0], float(a[1] or 1e18), a[2], float(a[3]), a[4], a[5]
ok = (v < lim if op == "<" else v <= lim) and n == want
print(f"goal {name} value={v:g} goal={op}{lim:g} met={'yes' if ok else 'no'}")
EOF
}

# Server CPU time of PID in clock ticks: "user+system system" (the kernel's share is most
# of a loopback request's cost, so it is reported apart).
cpu_ticks() {
    awk '{print $14 + $15, $15}' "/proc/$1/stat"
}

# cpu_of PID CMD...: CMD's JSON output with PID's CPU microseconds per request added.
cpu_of() {
    local pid=$1 t0 t1 j
    shift
    t0=$(cpu_ticks "$pid")
    j=$("$@")
    t1=$(cpu_ticks "$pid")
    add_cpu "$j" "$t0" "$t1"
}

add_cpu() { # json "ticks0 sys0" "ticks1 sys1"
    python3 - "$1" "$2" "$3" "$(getconf CLK_TCK)" <<'EOF'
import json, sys
j = json.loads(sys.argv[1] or "{}")
(t0, s0), (t1, s1) = (map(float, a.split()) for a in sys.argv[2:4])
hz, n = float(sys.argv[4]), j.get("requests") or 0
j["server_cpu_us_per_request"] = round((t1 - t0) * 1e6 / hz / n, 2) if n else None
j["server_sys_us_per_request"] = round((s1 - s0) * 1e6 / hz / n, 2) if n else None
print(json.dumps(j))
EOF
}

# cpu_bench PID ARGS...: sema bench, with the server's CPU microseconds per answered request
# added to the JSON (CPU per request is what caps a one-core server, and noise barely moves it).
cpu_bench() {
    local pid=$1 t0 t1 j
    shift
    t0=$(cpu_ticks "$pid")
    j=$(gen_json "$@")
    t1=$(cpu_ticks "$pid")
    add_cpu "$j" "$t0" "$t1"
}

bench() { # timeout-guarded sema bench, JSON out
    timeout 120 "$sema" bench --json "$@" 2>>"$tmp/bench.err"
}

pairs_line() { # figure-name json
    echo "figure $1 conns=$CONNS pairs_per_s=$(jget "$2" ops_per_s)" \
        "requests_per_s=$(jget "$2" requests_per_s) p50_us=$(jget "$2" p50_us)" \
        "p99_us=$(jget "$2" p99_us) pair_p50_us=$(jget "$2" op_p50_us)" \
        "pair_p99_us=$(jget "$2" op_p99_us) errors=$(jget "$2" errors)" \
        "server_cpu_us_per_request=$(jget "$2" server_cpu_us_per_request)" \
        "server_sys_us_per_request=$(jget "$2" server_sys_us_per_request)" \
        "generator_cpu_us_per_request=$(jget "$2" generator_cpu_us_per_request)"
}

echo "# semad_vs_peers: $(nproc) cores, $CONNS connections, ${SECS}s per throughput figure," \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)"

start_semad none --durability none
start_semad strict
"$ceiling" --listen 127.0.0.1:0 --max-seconds 600 >"$tmp/ceiling.log" 2>&1 &
pids+=($!)
pid_ceiling=$!
addr_ceiling=$(wait_listen "$tmp/ceiling.log") || exit 1

# Redis for the Redis/Lua peer: in memory only, and with every write fsynced (the durable
# peer for semad's strict store); start_redis (lib.sh) sets rport_NAME.
have_redis=0
if command -v redis-server >/dev/null && [ -x "$redis_peer" ]; then
    start_redis redis --appendonly no && start_redis redis_aof --appendonly yes \
        --appendfsync always && have_redis=1
fi
have_wrk=0
command -v wrk >/dev/null && have_wrk=1

# wrk's report as the JSON fields the other figures use.
wrk_json() {
    # wrk takes whole seconds only.
    with_cpu timeout 120 wrk -t1 -c "$CONNS" -d "$(python3 -c "import math; print(math.ceil($SECS))")s" \
        --latency "http://$1/healthz" | awk '
        function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; return v * 1e6 }
        /Requests\/sec/ { r = $2 } $1 == "50%" { p50 = us($2) } $1 == "99%" { p99 = us($2) }
        / requests in / { n = $1 } /^cpu_s / { cpu = $2 }
        END { printf "{\"requests_per_s\":%s,\"requests\":%d,\"p50_us\":%.1f,\"p99_us\":%.1f,", r + 0, n, p50, p99
              printf "\"generator_cpu_us_per_request\":%.2f}\n", n ? cpu * 1e6 / n : 0 }'
}

# with_cpu CMD...: runs CMD, then prints "cpu_s SECONDS" (its user+system CPU time).
with_cpu() {
    python3 -c '
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:]).returncode
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("cpu_s %.4f" % (r.ru_utime + r.ru_stime), flush=True)
sys.exit(rc)' "$@"
}

# gen_cmd CMD...: CMD's JSON line plus the generator's own CPU per request.
gen_cmd() {
    local out
    out=$(with_cpu "$@" 2>>"$tmp/bench.err")
    python3 - "$out" <<'EOF'
import json, sys
lines = sys.argv[1].splitlines()
j = json.loads(next((l for l in lines if l.startswith("{")), "{}"))
cpu = float(next((l.split()[1] for l in lines if l.startswith("cpu_s ")), "0"))
n = j.get("requests") or 0
j["generator_cpu_us_per_request"] = round(cpu * 1e6 / n, 2) if n else None
print(json.dumps(j))
EOF
}

gen_json() { # sema bench ARGS, as gen_cmd
    gen_cmd timeout 120 "$sema" bench --json "$@"
}

# The better of two JSON results by requests_per_s (the first round's when equal).
best() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
a, b = sys.argv[1], sys.argv[2]
if not a: print(b)
elif not b: print(a)
else:
    ra = json.loads(a).get("requests_per_s") or 0
    rb = json.loads(b).get("requests_per_s") or 0
    print(a if ra >= rb else b)
EOF
}

# Context for the strict store: what one fdatasync costs on the disk under $tmp.
python3 - "$tmp/fsync.probe" <<'EOF'
import os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o600)
ts = []
for i in range(100):
    os.pwrite(fd, b"x" * 4096, (i % 16) * 4096)
    t = time.perf_counter()
    os.fdatasync(fd)
    ts.append(time.perf_counter() - t)
os.close(fd)
ts.sort()
print(f"figure fdatasync_tmp p50_us={ts[50] * 1e6:.0f} p90_us={ts[90] * 1e6:.0f}")
EOF

# 1-3. Throughput, interleaved over ROUNDS rounds so every contender sees the same machine;
# each figure is its best round.
for r in $(seq "$ROUNDS"); do
    j_ceil=$(best "${j_ceil:-}" "$(cpu_bench "$pid_ceiling" -s "http://$addr_ceiling" -c "$CONNS" -d "${SECS}s" --no-create)")
    j_none=$(best "${j_none:-}" "$(cpu_bench "$pid_none" -s "http://$addr_none" -c "$CONNS" -d "${SECS}s" --name pairs-none)")
    j_strict=$(best "${j_strict:-}" "$(cpu_bench "$pid_strict" -s "http://$addr_strict" -c "$CONNS" -d "${SECS}s" --name pairs-strict)")
    if [ "$have_redis" = 1 ]; then
        j_redis=$(best "${j_redis:-}" "$(cpu_of "$pid_redis" gen_cmd timeout 120 "$redis_peer" --redis "127.0.0.1:$rport_redis" -c "$CONNS" -d "${SECS}s" --json)")
        j_aof=$(best "${j_aof:-}" "$(cpu_of "$pid_redis_aof" gen_cmd timeout 120 "$redis_peer" --redis "127.0.0.1:$rport_redis_aof" -c "$CONNS" -d "${SECS}s" --json)")
    fi
    j_get=$(best "${j_get:-}" "$(cpu_bench "$pid_none" -s "http://$addr_none" -c "$CONNS" -d "${SECS}s" -m get --path /healthz)")
    if [ "$have_wrk" = 1 ]; then
        j_wrk=$(best "${j_wrk:-}" "$(wrk_json "$addr_none")")
    fi
    j_ceil_get=$(best "${j_ceil_get:-}" "$(cpu_bench "$pid_ceiling" -s "http://$addr_ceiling" -c "$CONNS" -d "${SECS}s" -m get --path /healthz)")
done

# 1. acquire+release pairs: semad (none, strict) against the constant-answer ceiling.
pairs_line pairs_ceiling "$j_ceil"
pairs_line pairs_semad_none "$j_none"
pairs_line pairs_semad_strict "$j_strict"
ratio semad_none_requests_vs_ceiling "$(jget "$j_none" requests_per_s)" "$(jget "$j_ceil" requests_per_s)" 0.8
ratio semad_strict_requests_vs_ceiling "$(jget "$j_strict" requests_per_s)" "$(jget "$j_ceil" requests_per_s)" 0.8
ratio semad_none_cpu_per_request_vs_ceiling_pairs "$(jget "$j_ceil" server_cpu_us_per_request)" "$(jget "$j_none" server_cpu_us_per_request)" 0.8

# 2. The Redis/Lua semaphore with the same concurrency.
if [ "$have_redis" = 1 ]; then
    for f in "pairs_redis_lua:$j_redis" "pairs_redis_lua_aof_always:$j_aof"; do
        j=${f#*:}
        echo "figure ${f%%:*} conns=$CONNS pairs_per_s=$(jget "$j" pairs_per_s)" \
            "requests_per_s=$(jget "$j" requests_per_s) p50_us=$(jget "$j" p50_us)" \
            "p99_us=$(jget "$j" p99_us) pair_p50_us=$(jget "$j" pair_p50_us)" \
            "pair_p99_us=$(jget "$j" pair_p99_us) errors=$(jget "$j" errors)" \
            "server_cpu_us_per_request=$(jget "$j" server_cpu_us_per_request)" \
            "server_sys_us_per_request=$(jget "$j" server_sys_us_per_request)" \
            "generator_cpu_us_per_request=$(jget "$j" generator_cpu_us_per_request)"
    done
    ratio semad_none_pairs_vs_redis_lua "$(jget "$j_none" ops_per_s)" "$(jget "$j_redis" pairs_per_s)" 2
    ratio semad_strict_pairs_vs_redis_lua "$(jget "$j_strict" ops_per_s)" "$(jget "$j_redis" pairs_per_s)" 2
    ratio semad_strict_pairs_vs_redis_lua_aof_always "$(jget "$j_strict" ops_per_s)" "$(jget "$j_aof" pairs_per_s)" 2
    # Noise-robust: pairs per CPU-second of the server (both answer two requests per pair).
    ratio semad_none_cpu_per_pair_vs_redis_lua "$(jget "$j_redis" server_cpu_us_per_request)" "$(jget "$j_none" server_cpu_us_per_request)" 2
else
    echo "# redis-server or bench_redis_peer missing: Redis/Lua figure skipped"
fi

# 3. The generator against wrk: the same GET, the same connection count, one thread each.
for f in "get_healthz_sema_bench:$j_get" "get_healthz_wrk:${j_wrk:-}" "get_healthz_ceiling:$j_ceil_get"; do
    [ -n "${f#*:}" ] || continue
    echo "figure ${f%%:*} conns=$CONNS requests_per_s=$(jget "${f#*:}" requests_per_s)" \
        "p50_us=$(jget "${f#*:}" p50_us) p99_us=$(jget "${f#*:}" p99_us)" \
        "server_cpu_us_per_request=$(jget "${f#*:}" server_cpu_us_per_request)" \
        "generator_cpu_us_per_request=$(jget "${f#*:}" generator_cpu_us_per_request)"
done
if [ "$have_wrk" = 1 ]; then
    ratio sema_bench_vs_wrk "$(jget "$j_get" requests_per_s)" "$(jget "$j_wrk" requests_per_s)" 1
    ratio sema_bench_vs_wrk_cpu_per_request "$(jget "$j_wrk" generator_cpu_us_per_request)" "$(jget "$j_get" generator_cpu_us_per_request)" 1
else
    echo "# wrk missing (scripts/deps.sh bench): wrk figure skipped"
fi
ratio semad_get_vs_ceiling "$(jget "$j_get" requests_per_s)" "$(jget "$j_ceil_get" requests_per_s)" 0.8
ratio semad_cpu_per_request_vs_ceiling_get "$(jget "$j_ceil_get" server_cpu_us_per_request)" "$(jget "$j_get" server_cpu_us_per_request)" 0.8

# 4. release -> parked waiter hand-off: one round trip (the release goes in on one connection,
# the grant comes out on another). Its floor is one round trip of GET /healthz to the same
# semad on one connection, measured by the same client, interleaved: on a VM whose idle vCPUs
# sleep in the hypervisor, waking the other vCPU costs tens of microseconds whatever the
# server does, and which CPU each new process lands on changes from run to run. Each figure
# is its lowest-median round.
lower_p50() { # the JSON with the lower p50_us
    python3 - "$1" "$2" <<'EOF'
import json, sys
a, b = sys.argv[1], sys.argv[2]
if not a: print(b)
elif not b: print(a)
else: print(a if json.loads(a).get("p50_us", 1e18) <= json.loads(b).get("p50_us", 1e18) else b)
EOF
}
j_hand='' j_floor=''
for r in $(seq "$ROUNDS"); do
    j_hand=$(lower_p50 "$j_hand" "$(bench -s "http://$addr_none" -m handoff -n "$HANDOFFS" --name "handoff$r")")
    j_floor=$(lower_p50 "$j_floor" "$(bench -s "http://$addr_none" -m get --path /healthz -c 1 -n "$HANDOFFS")")
done
echo "figure handoff_semad_none rounds=$(jget "$j_hand" ops) p50_us=$(jget "$j_hand" p50_us)" \
    "p90_us=$(jget "$j_hand" p90_us) p99_us=$(jget "$j_hand" p99_us) max_us=$(jget "$j_hand" max_us)"
echo "figure round_trip_floor_semad requests=$(jget "$j_floor" requests) p50_us=$(jget "$j_floor" p50_us)" \
    "p90_us=$(jget "$j_floor" p90_us) p99_us=$(jget "$j_floor" p99_us)"
goal handoff_p50_us "$(jget "$j_hand" p50_us)" "<" 100
echo "figure handoff_over_floor p50_ratio=$(python3 -c 'import sys; a,b=(float(x or 0) for x in sys.argv[1:]); print(f"{a/b:.2f}" if b else "")' "$(jget "$j_hand" p50_us)" "$(jget "$j_floor" p50_us)")"

# 5. parked waiters' memory.
j=$(bench -s "http://$addr_none" -m park -c "$WAITERS" --name park --server-pid "$pid_none")
parked=$(jget "$j" ops)
b=$(python3 -c 'import sys; a,b,n=map(float,sys.argv[1:]); print(f"{(b-a)*1024/n:.0f}" if n else 0)' \
    "$(jget "$j" rss_before_kib)" "$(jget "$j" rss_after_kib)" "${parked:-0}")
echo "figure parked_waiters_semad count=$parked rss_before_kib=$(jget "$j" rss_before_kib)" \
    "rss_after_kib=$(jget "$j" rss_after_kib) bytes_per_waiter=$b drain_s=$(jget "$j" drain_s)"
goal parked_waiter_bytes "$b" "<=" 2048 "${parked:-0}" "$WAITERS"

# 6. idle semaphores' memory, in a fresh semad.
if [ "$IDLE" -gt 0 ]; then
    start_semad idle --durability none --max-semaphores 0
    j=$(bench -s "http://$addr_idle" -m create -n "$IDLE" -c "$CONNS" -P 16 --name idle \
        --server-pid "$pid_idle")
    made=$(jget "$j" ops)
    mib=$(python3 -c 'import sys; print(f"{float(sys.argv[1] or 0)/1024:.1f}")' "$(jget "$j" rss_after_kib)")
    echo "figure idle_semaphores_semad count=$made rss_before_kib=$(jget "$j" rss_before_kib)" \
        "rss_after_kib=$(jget "$j" rss_after_kib) rss_mib=$mib creates_per_s=$(jget "$j" ops_per_s)"
    goal idle_semaphores_rss_mib "$mib" "<=" "$((256 * IDLE / 1000000))" "${made:-0}" "$IDLE"
fi
if [ -s "$tmp/bench.err" ]; then
    echo "# sema bench said:" && sed 's/^/#   /' "$tmp/bench.err"
fi
# Missed goals are figures, not failures; a figure that could not be measured is one.
for v in "$j_ceil" "$j_none" "$j_strict" "$j_get"; do
    [ -n "$(jget "$v" requests_per_s)" ] || exit 1
done
exit 0
