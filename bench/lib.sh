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
