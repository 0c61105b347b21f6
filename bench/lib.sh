# SPDX-License-Identifier: MIT
# lib.sh - what the benchmark scripts share: a temp dir and the processes they start, both
# cleaned up on exit (Ctrl-C included), and the wait for a server's listening address.
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
