#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# durability_vs_redis.sh - what each durability mode of semad costs, beside a Redis/Lua
# semaphore with and without an fsync per write, in one run on loopback. Starts semad with
# --durability strict, relaxed and none, redis-server without persistence and with
# `appendonly yes, appendfsync always`, all on ephemeral 127.0.0.1 ports with temp dirs; drives
# each in turn with the same closed-loop client shape (CONNS connections, acquire+release
# pairs on one semaphore that never makes anyone wait), ROUNDS interleaved rounds so a change
# in the machine's load weighs on all five alike, and prints per round and in summary:
#
#   round R NAME pairs_per_s=X server_cpu_us_per_pair=Y server_sys_us_per_pair=Z
#   store R NAME requests_per_commit=X commit_us_mean=Y checkpoints=Z   (strict, relaxed)
#   figure NAME pairs_per_s_median=X min=.. max=.. server_cpu_us_per_pair_median=Y ...
#   ratio NAME median=X min=.. max=.. goal=>=G met=yes|no   (per-round ratios: same moment)
#
# Usage: bench/durability_vs_redis.sh [BUILD_DIR]   (default: $SEMA_BUILD_DIR or ./build)
# Environment: SECS (seconds per figure, default 2), ROUNDS (default 5), CONNS (default 50).
set -u

build=${1:-${SEMA_BUILD_DIR:-build}}
SECS=${SECS:-2}
ROUNDS=${ROUNDS:-5}
CONNS=${CONNS:-50}

semad=$build/bin/semad
sema=$build/bin/sema
redis_peer=$build/bin/bench_redis_peer
for p in "$semad" "$sema" "$redis_peer"; do
    if [ ! -x "$p" ]; then
        echo "durability_vs_redis: $p is missing; build first (cmake --build $build)" >&2
        exit 1
    fi
done
if ! command -v redis-server >/dev/null; then
    echo "durability_vs_redis: redis-server is missing (scripts/deps.sh bench)" >&2
    exit 1
fi

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init durability

start_semad() { # NAME MODE: sets addr_NAME and pid_NAME
    mkdir -p "$tmp/$1"
    "$semad" --listen 127.0.0.1:0 --data "$tmp/$1/data" --durability "$2" \
        >"$tmp/$1/log" 2>&1 &
    pids+=($!)
    printf -v "pid_$1" '%s' "$!"
    local a
    a=$(wait_listen "$tmp/$1/log" "$!") || exit 1
    printf -v "addr_$1" '%s' "$a"
}

# The server's CPU time (all its threads) in clock ticks: "user+system system".
cpu_ticks() {
    awk '{print $14 + $15, $15}' "/proc/$1/stat"
}

# A durable semad's store counters from /metrics: "commits commit_seconds_sum checkpoints".
store_counts() {
    python3 - "$1" <<'EOF'
import sys, urllib.request
want = ["semad_store_commits_total", "semad_store_commit_seconds_sum",
        "semad_store_checkpoints_total"]
got = {}
text = urllib.request.urlopen("http://%s/metrics" % sys.argv[1], timeout=10).read().decode()
for line in text.splitlines():
    k, _, v = line.partition(" ")
    if k in want:
        got[k] = v
print(" ".join(got.get(k, "0") for k in want))
EOF
}

# measure NAME PID CMD...: runs the client CMD (one JSON line out), prints one "round" line;
# with $maddr set (a durable semad's address), a "store" line too: requests per commit and
# the mean time of a commit (write and sync), from /metrics around the run.
measure() {
    local name=$1 pid=$2 t0 t1 j m0="" m1=""
    shift 2
    [ -n "${maddr:-}" ] && m0=$(store_counts "$maddr")
    t0=$(cpu_ticks "$pid")
    j=$(timeout 120 "$@" 2>>"$tmp/client.err" | grep -m1 '^{')
    t1=$(cpu_ticks "$pid")
    [ -n "${maddr:-}" ] && m1=$(store_counts "$maddr")
    python3 - "$name" "$r" "$j" "$t0" "$t1" "$(getconf CLK_TCK)" "$m0" "$m1" <<'EOF'
import json, sys
name, rnd, j = sys.argv[1], sys.argv[2], json.loads(sys.argv[3] or "{}")
(t0, s0), (t1, s1) = (map(float, a.split()) for a in sys.argv[4:6])
hz = float(sys.argv[6])
pairs = j.get("pairs", j.get("ops")) or 0
secs = j.get("seconds") or 0
rate = pairs / secs if secs else 0
cpu = (t1 - t0) * 1e6 / hz / pairs if pairs else 0
sys_ = (s1 - s0) * 1e6 / hz / pairs if pairs else 0
print(f"round {rnd} {name} pairs_per_s={rate:.0f} server_cpu_us_per_pair={cpu:.2f}"
      f" server_sys_us_per_pair={sys_:.2f} errors={j.get('errors', 'none')}")
if sys.argv[7] and sys.argv[8]:
    (c0, d0, k0), (c1, d1, k1) = (map(float, a.split()) for a in sys.argv[7:9])
    if c1 > c0:
        n = c1 - c0
        print(f"store {rnd} {name} requests_per_commit={j.get('requests', 0) / n:.1f}"
              f" commit_us_mean={(d1 - d0) * 1e6 / n:.0f} checkpoints={k1 - k0:.0f}")
EOF
}

echo "# durability_vs_redis: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
    "$CONNS connections, ${SECS}s per figure, $ROUNDS rounds, $(date -u +%Y-%m-%dT%H:%M:%SZ)," \
    "$(redis-server --version | grep -o 'v=[0-9.]*')"

start_semad strict strict
start_semad relaxed relaxed
start_semad none none
start_redis redis --appendonly no || exit 1
start_redis redis_aof --appendonly yes --appendfsync always || exit 1

# What one fdatasync costs on the disk under $tmp right now (both durable servers pay it).
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
print(f"# fdatasync under {os.path.dirname(sys.argv[1])}: p50 {ts[50] * 1e6:.0f} us, p90 {ts[90] * 1e6:.0f} us")
EOF

out=$tmp/rounds
for r in $(seq "$ROUNDS"); do
    for m in strict relaxed none; do
        pid_var=pid_$m addr_var=addr_$m
        maddr=""
        [ "$m" != none ] && maddr=${!addr_var}
        measure "semad_$m" "${!pid_var}" "$sema" bench --json -s "http://${!addr_var}" \
            -c "$CONNS" -d "${SECS}s" --name "pairs-$m"
    done
    maddr=""
    measure redis_lua "$pid_redis" "$redis_peer" --redis "127.0.0.1:$rport_redis" \
        -c "$CONNS" -d "${SECS}s" --json
    measure redis_lua_aof_always "$pid_redis_aof" "$redis_peer" \
        --redis "127.0.0.1:$rport_redis_aof" -c "$CONNS" -d "${SECS}s" --json
done | tee "$out"

python3 - "$out" <<'EOF'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+) (\S+) pairs_per_s=(\S+) server_cpu_us_per_pair=(\S+) "
                 r"server_sys_us_per_pair=(\S+)", line)
    if m:
        rows.setdefault(m[2], {})[int(m[1])] = tuple(float(x) for x in m.group(3, 4, 5))
def num(x):
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"
def spread(v):
    return f"median={num(statistics.median(v))} min={num(min(v))} max={num(max(v))}"
store = {}
for line in open(sys.argv[1]):
    m = re.match(r"store \d+ (\S+) requests_per_commit=(\S+) commit_us_mean=(\S+)", line)
    if m:
        store.setdefault(m[1], []).append((float(m[2]), float(m[3])))
for name, v in store.items():
    print(f"figure {name} requests_per_commit_{spread([x[0] for x in v])}"
          f" commit_us_mean_{spread([x[1] for x in v])}")
for name, rr in rows.items():
    r = list(rr.values())
    print(f"figure {name} pairs_per_s_{spread([x[0] for x in r])}"
          f" server_cpu_us_per_pair_{spread([x[1] for x in r])}"
          f" server_sys_us_per_pair_{spread([x[2] for x in r])}")
def ratio(name, a, b, goal=None, idx=0, inverse=False):
    if a not in rows or b not in rows:
        return
    v = [(rows[b][k][idx] / rows[a][k][idx] if inverse else rows[a][k][idx] / rows[b][k][idx])
         for k in rows[a] if k in rows[b] and rows[a][k][idx] and rows[b][k][idx]]
    if not v:
        return
    g = "" if goal is None else \
        f" goal=>={goal:g} met={'yes' if statistics.median(v) >= goal else 'no'}"
    print(f"ratio {name} {spread(v)}{g}")
ratio("strict_vs_redis_aof_always_pairs", "semad_strict", "redis_lua_aof_always", 2)
ratio("strict_vs_none_pairs", "semad_strict", "semad_none", 0.8)
ratio("relaxed_vs_none_pairs", "semad_relaxed", "semad_none")
ratio("relaxed_vs_redis_aof_always_pairs", "semad_relaxed", "redis_lua_aof_always")
ratio("none_vs_redis_lua_pairs", "semad_none", "redis_lua")
# CPU per pair: the peer's over semad's (how many more pairs per server CPU-second)
ratio("strict_vs_redis_aof_always_cpu_per_pair", "semad_strict", "redis_lua_aof_always",
      idx=1, inverse=True)
ratio("strict_vs_none_cpu_per_pair", "semad_strict", "semad_none", idx=1, inverse=True)
ratio("none_vs_redis_lua_cpu_per_pair", "semad_none", "redis_lua", idx=1, inverse=True)
EOF
if [ -s "$tmp/client.err" ]; then
    echo "# the clients said:" && sed 's/^/#   /' "$tmp/client.err" | head -20
fi
