#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# tls_vs_plain.sh - what TLS costs semad, in one run on loopback: two semads with the same
# flags, one serving plain HTTP and one HTTPS (--tls-cert, a P-256 certificate this script
# makes with the openssl command), driven in interleaved rounds by the same generator, `sema
# bench -m pairs` (one libuv loop, keep-alive connections; with https:// each connection is
# an OpenSSL client, so the two runs differ by TLS alone, on both sides of the socket). Each
# connection's handshake happens once, before the measuring window: the figures are the cost
# of encrypting requests and replies, not of handshakes.
#
# Usage: bench/tls_vs_plain.sh [BUILD_DIR]      (default: $SEMA_BUILD_DIR or ./build)
# Environment: SECS (seconds per round, default 3), ROUNDS (interleaved rounds, default 5),
#   CONNS (default 50), DUR (semad's --durability, default none).
# Output: "figure NAME pairs_per_s=... server_cpu_us_per_request=..." per round (median of the
#   rounds), then "ratio tls_vs_plain_pairs value=X" and the server CPU ratio.
set -u

build=${1:-${SEMA_BUILD_DIR:-build}}
SECS=${SECS:-3}
ROUNDS=${ROUNDS:-5}
CONNS=${CONNS:-50}
DUR=${DUR:-none}
semad=$build/bin/semad
sema=$build/bin/sema
for p in "$semad" "$sema"; do
    [ -x "$p" ] || { echo "tls_vs_plain: $p is missing; build first" >&2; exit 1; }
done
command -v openssl >/dev/null || { echo "tls_vs_plain: the openssl command is needed" >&2; exit 1; }

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init tls

# A CA and a server certificate for 127.0.0.1 (P-256: what a current deployment would use).
(
    cd "$tmp" &&
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
            -out ca.pem -days 2 -subj "/CN=bench CA" &&
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv.key \
            -out srv.csr -subj "/CN=127.0.0.1" &&
        echo "subjectAltName=IP:127.0.0.1" >srv.ext &&
        openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem \
            -days 2 -extfile srv.ext
) >/dev/null 2>&1 || { echo "tls_vs_plain: openssl failed" >&2; exit 1; }

start() { # NAME FLAGS...: sets pid_NAME and url_NAME
    local name=$1 a scheme=http
    shift
    [ $# -gt 0 ] && scheme=https
    "$semad" --listen 127.0.0.1:0 --data "$tmp/$name" --durability "$DUR" "$@" \
        >"$tmp/$name.log" 2>&1 &
    pids+=($!)
    printf -v "pid_$name" '%s' "$!"
    a=$(wait_listen "$tmp/$name.log") || exit 1
    printf -v "url_$name" '%s' "$scheme://$a"
}
start plain
start tls --tls-cert "$tmp/srv.pem" --tls-key "$tmp/srv.key"
export SEMA_CACERT=$tmp/ca.pem
for u in "$url_plain" "$url_tls"; do
    "$sema" create bench "$CONNS" --server "$u" >/dev/null || exit 1
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

round() { # NAME: one round; prints "pairs_per_s server_cpu_us_per_request"
    local name=$1 pid url t0 t1 j
    pid=pid_$1 url=url_$1
    t0=$(ticks "${!pid}")
    j=$(timeout 120 "$sema" bench --json --no-create -m pairs -c "$CONNS" -d "${SECS}s" \
        -s "${!url}" 2>>"$tmp/bench.err")
    t1=$(ticks "${!pid}")
    python3 - "$j" "$t0" "$t1" "$(getconf CLK_TCK)" <<'EOF'
import json, sys
j = json.loads(sys.argv[1] or "{}")
n, hz = j.get("requests") or 0, float(sys.argv[4])
cpu = (float(sys.argv[3]) - float(sys.argv[2])) * 1e6 / hz / n if n else 0
if j.get("errors"):
    sys.exit("errors in the run: %s" % j)
print(j.get("ops_per_s", 0), round(cpu, 2))
EOF
}

echo "# tls_vs_plain: $(nproc) cores, $CONNS connections, ${SECS}s x $ROUNDS rounds each," \
    "durability $DUR, $(openssl version)"
: >"$tmp/plain.res"
: >"$tmp/tls.res"
for _ in $(seq "$ROUNDS"); do
    round plain >>"$tmp/plain.res" || exit 1
    round tls >>"$tmp/tls.res" || exit 1
done
python3 - "$tmp/plain.res" "$tmp/tls.res" "$CONNS" <<'EOF'
import statistics, sys
def load(p):
    rows = [tuple(map(float, l.split())) for l in open(p) if l.strip()]
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows), rows
plain, tls = load(sys.argv[1]), load(sys.argv[2])
for name, (pairs, cpu, rows) in (("plain", plain), ("tls", tls)):
    print(f"figure semad_{name}_pairs conns={sys.argv[3]} pairs_per_s={pairs:.0f} "
          f"server_cpu_us_per_request={cpu:.2f} rounds={' '.join(f'{r[0]:.0f}' for r in rows)}")
print(f"ratio tls_vs_plain_pairs value={tls[0] / plain[0]:.3f}")
print(f"ratio tls_vs_plain_server_cpu_per_request value={tls[1] / plain[1]:.3f}")
EOF
