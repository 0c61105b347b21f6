# SPDX-License-Identifier: MIT
# lib.sh - what the benchmark scripts share: a temp dir and the processes they start, both
# cleaned up on exit (Ctrl-C included), the wait for a server's listening address, and a
# redis-server of their own.
# Source it, then call bench_init NAME.

# Make $tmp, track started processes in $pids, stop them and remove $tmp on exit.
bench_init() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/sema-$1.XXXXXX")
    pids=()
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

# shellcheck disable=SC2317 # called by the trap
bench_cleanup() {
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null
    done
    rm -rf "$tmp"
}

# wait_listen LOG [PID]: wait up to 20 s for "127.0.0.1:PORT" in LOG (the line semad, the
# ceiling and the peers print when bound) and print it; give up early if PID has exited.
wait_listen() {
    local a
    for _ in $(seq 200); do
        a=$(grep -o -m1 '127\.0\.0\.1:[0-9]*' "$1" 2>/dev/null)
        if [ -n "$a" ]; then
            echo "$a"
            return 0
        fi
        if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    echo "no listening address in $1:" >&2
    cat "$1" >&2
    return 1
}

# start_redis NAME [FLAGS...]: a redis-server on a free loopback port, in memory unless FLAGS
# say otherwise, its files and log in $tmp/NAME; sets rport_NAME and pid_NAME. Returns 1 (with
# its log on stderr) when it does not start within 5 s.
start_redis() {
    local name=$1 port
    shift
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$tmp/$name"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --dir "$tmp/$name" --daemonize no \
        "$@" >"$tmp/$name/log" 2>&1 &
    pids+=($!)
    printf -v "pid_$name" '%s' "$!"
    for _ in $(seq 50); do
        if grep -q "Ready to accept" "$tmp/$name/log"; then
            printf -v "rport_$name" '%s' "$port"
            return 0
        fi
        sleep 0.1
    done
    echo "redis-server did not start:" >&2
    cat "$tmp/$name/log" >&2
    return 1
}

# jget JSON KEY: the value of KEY in a JSON object, empty when absent.
jget() {
    python3 -c 'import json,sys; v=json.loads(sys.argv[1] or "{}").get(sys.argv[2]); print(v if v is not None else "")' "$1" "$2"
}

# bench_cpu PID CMD...: run CMD (a `sema bench --json` run) and print its JSON with
# "server_cpu_us_per_request": the CPU time process PID spent meanwhile, per request.
bench_cpu() {
    local pid=$1 t0 t1 j
    shift
    t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    j=$("$@")
    t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    python3 - "$j" "$t0" "$t1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
j = json.loads(sys.argv[1] or "{}")
n = j.get("requests") or 0
j["server_cpu_us_per_request"] = round((float(sys.argv[3]) - float(sys.argv[2])) * 1e6 / float(sys.argv[4]) / n, 2) if n else None
print(json.dumps(j))
PY
}

# best_pairs A B: of two `sema bench --json` results, the one with more pairs/s.
best_pairs() {
    python3 - "$1" "$2" <<'PY'
import json, sys
a, b = sys.argv[1], sys.argv[2]
print(b if not a or (b and (json.loads(b).get("ops_per_s") or 0) > (json.loads(a).get("ops_per_s") or 0)) else a)
PY
}
