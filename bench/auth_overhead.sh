#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# auth_overhead.sh - what `semad --auth` costs: acquire+release pairs/s of one semad without
# tokens and one with a token file of TOKENS tokens (every request hashed with SHA-256, looked
# up, its right and prefix checked, and the lease stamped with the token), side by side in
# one run, interleaved over ROUNDS rounds (each figure is its best round), plus the server's
# CPU time per request. Starts both servers itself on ephemeral 127.0.0.1 ports.
#
# Usage: bench/auth_overhead.sh [BUILD_DIR]      (default: $SEMA_BUILD_DIR or ./build)
# Environment: SECS (seconds per run, default 2), ROUNDS (default 5), CONNS (default 50),
#   TOKENS (tokens in the file, default 1000), IR (pairs for the callgrind figure, default
#   20000; 0 or no valgrind skips it).
# The callgrind figure (bench/callgrind_ir.sh, both servers) is semad's user-space
# instructions per request with and without --auth: repeatable where wall time is not.
# Output lines: "figure NAME key=value ..." and "ratio NAME value=X".
set -u

build=${1:-${SEMA_BUILD_DIR:-build}}
SECS=${SECS:-2}
ROUNDS=${ROUNDS:-5}
CONNS=${CONNS:-50}
TOKENS=${TOKENS:-1000}
semad=$build/bin/semad
sema=$build/bin/sema
for p in "$semad" "$sema"; do
    [ -x "$p" ] || { echo "auth_overhead: $p is missing; build first" >&2; exit 1; }
done

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init auth

# The token file: TOKENS - 1 others (random hashes) and the one the generator sends, an admin
# (sema bench creates its semaphore) limited to the prefix "bench" (so the prefix check runs).
python3 - "$tmp/tokens" "$((TOKENS - 1))" <<'PY'
import os, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write("t%d sha256:%s acquire,read team%d/\n" % (i, os.urandom(32).hex(), i))
PY
token=$("$sema" token new bench --rights admin --prefix bench --file "$tmp/tokens" 2>/dev/null) ||
    { echo "auth_overhead: sema token new failed" >&2; exit 1; }

start() { # NAME FLAGS...: sets addr_NAME and pid_NAME
    local name=$1
    shift
    "$semad" --listen 127.0.0.1:0 --durability none --max-connections 30000 "$@" \
        >"$tmp/$name.log" 2>&1 &
    pids+=($!)
    printf -v "pid_$name" '%s' "$!"
    local a
    a=$(wait_listen "$tmp/$name.log" "$!") || exit 1
    printf -v "addr_$name" '%s' "$a"
}
start plain
start auth --auth "$tmp/tokens"

# run PID ADDR TOKEN: one sema bench run, with the server's CPU microseconds per request.
run() {
    SEMA_TOKEN=$3 bench_cpu "$1" timeout 120 "$sema" bench --json -s "http://$2" -c "$CONNS" \
        -d "${SECS}s" --name bench-x 2>>"$tmp/bench.err"
}

echo "# auth_overhead: $(nproc) cores, $CONNS connections, ${SECS}s x $ROUNDS rounds," \
    "$TOKENS tokens, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
j_plain="" j_auth=""
for _ in $(seq "$ROUNDS"); do
    j_plain=$(best_pairs "$j_plain" "$(run "$pid_plain" "$addr_plain" "")")
    j_auth=$(best_pairs "$j_auth" "$(run "$pid_auth" "$addr_auth" "$token")")
done
for f in "pairs_semad_no_auth:$j_plain" "pairs_semad_auth:$j_auth"; do
    j=${f#*:}
    echo "figure ${f%%:*} conns=$CONNS pairs_per_s=$(jget "$j" ops_per_s)" \
        "requests_per_s=$(jget "$j" requests_per_s) p50_us=$(jget "$j" p50_us)" \
        "p99_us=$(jget "$j" p99_us) errors=$(jget "$j" errors)" \
        "server_cpu_us_per_request=$(jget "$j" server_cpu_us_per_request)"
done
python3 - "$j_plain" "$j_auth" <<'PY'
import json, sys
p, a = (json.loads(x or "{}") for x in sys.argv[1:3])
def r(n, d):
    return n / d if n and d else 0.0
print("ratio semad_auth_pairs_vs_no_auth value=%.3f" % r(a.get("ops_per_s"), p.get("ops_per_s")))
print("ratio semad_auth_cpu_per_request_vs_no_auth value=%.3f"
      % r(a.get("server_cpu_us_per_request"), p.get("server_cpu_us_per_request")))
PY
# Instructions per request, under callgrind (repeatable on a noisy machine).
IR=${IR:-20000}
if [ "$IR" -gt 0 ] && command -v valgrind >/dev/null; then
    ir_plain=$(bash "$(dirname "$0")/callgrind_ir.sh" "$build" semad "$IR" pairs)
    ir_auth=$(SEMAD_ARGS="--auth $tmp/tokens" SEMA_TOKEN=$token \
        bash "$(dirname "$0")/callgrind_ir.sh" "$build" semad "$IR" pairs)
    echo "figure ir_semad_no_auth ${ir_plain#* }"
    echo "figure ir_semad_auth ${ir_auth#* }"
    python3 - "$ir_plain" "$ir_auth" <<'PY'
import re, sys
p, a = (float(re.search(r"instructions_per_request=(\d+)", x).group(1)) for x in sys.argv[1:3])
print("ratio semad_auth_instructions_per_request_vs_no_auth value=%.3f extra=%.0f" % (a / p, a - p))
PY
fi
# Every request of the auth run carried the token: a 401/403 would show up as errors.
if [ "$(jget "$j_auth" errors)" != "0" ]; then
    echo "auth_overhead: the --auth run had errors" >&2
    exit 1
fi
