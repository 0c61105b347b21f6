#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# dashboard_cost.sh - what open dashboard tabs (/ui) cost semad, in its own CPU time, against
# the same semad without them in the same run (docs/dashboard.md#what-it-costs):
#  - each request a tab makes, in server CPU microseconds (sema bench -m get on that path,
#    the server's CPU time over the requests it served): /healthz (the cheapest route, the
#    peer), a page of 50 of 10,000 semaphores, the state of a semaphore with 1,000 waiters,
#    /metrics; from them, what an overview tab costs per second at the page's 2 s;
#  - acquire+release pairs on a semaphore that 0, 1 and 10 tabs follow (its event stream,
#    its state every 500 ms, /metrics every 15 s: bench/dashboard_tabs.py), interleaved over
#    ROUNDS rounds, each figure its best round: pairs/s and server CPU per pair.
# Starts semad itself on an ephemeral 127.0.0.1 port.
#
# Usage: bench/dashboard_cost.sh [BUILD_DIR]      (default: $SEMA_BUILD_DIR or ./build)
# Environment: SECS (seconds per run, default 2), ROUNDS (default 3), CONNS (default 50).
# Output lines: "figure NAME key=value ..." and "ratio NAME value=X".
set -u

build=${1:-${SEMA_BUILD_DIR:-build}}
SECS=${SECS:-2}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-50}
semad=$build/bin/semad
sema=$build/bin/sema
here=$(dirname "$0")
for p in "$semad" "$sema"; do
    [ -x "$p" ] || { echo "dashboard_cost: $p is missing; build first" >&2; exit 1; }
done

# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_init dashboard

"$semad" --listen 127.0.0.1:0 --durability none --max-ticket-keepalive 1h \
    >"$tmp/semad.log" 2>&1 &
pid=$!
pids+=("$pid")
addr=$(wait_listen "$tmp/semad.log" "$pid") || exit 1

cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }

# us of server CPU per request from a sema bench JSON line and the CPU ticks before and after
per_request() {
    python3 - "$1" "$2" "$3" "$(getconf CLK_TCK)" <<'PY'
import json, sys
j = json.loads(sys.argv[1] or "{}")
n = j.get("requests") or 0
us = (float(sys.argv[3]) - float(sys.argv[2])) * 1e6 / float(sys.argv[4])
print("%.2f %s %s" % (us / n if n else 0, j.get("ops_per_s") or 0, j.get("ops") or 0))
PY
}

# the state the tabs look at: 10,000 semaphores; a queue of 1,000 tickets behind a holder
"$sema" bench -m create -n 10000 -P 16 --name tenant -s "http://$addr" --json >/dev/null 2>&1 ||
    { echo "dashboard_cost: creating 10,000 semaphores failed" >&2; exit 1; }
python3 - "$addr" <<'PY' || exit 1
import http.client, json, sys
c = http.client.HTTPConnection(*sys.argv[1].split(":"))
def req(m, p, b):
    c.request(m, p, json.dumps(b))
    r = c.getresponse()
    r.read()
    assert r.status in (200, 201), (p, r.status)
req("PUT", "/v1/semaphores/queue", {"capacity": 1})
req("PUT", "/v1/semaphores/watched", {"capacity": 1000})  # the pairs' (nothing parks)
req("POST", "/v1/semaphores/queue/acquire", {"ttl_ms": 3600000})
for i in range(1000):
    req("POST", "/v1/semaphores/queue/tickets", {"owner": "visitor-%d" % i, "keepalive_ms": 3600000})
PY

echo "# dashboard_cost: $(nproc) cores, $CONNS connections, ${SECS}s x $ROUNDS rounds, $(date -u +%Y-%m-%dT%H:%M:%SZ)"

# what one request of each kind costs (best of ROUNDS: the least CPU per request)
declare -A req_us
for kind in healthz:/healthz list50:/v1/semaphores?limit=50 state1000:/v1/semaphores/queue \
    metrics:/metrics; do
    name=${kind%%:*} path=${kind#*:} best=""
    for _ in $(seq "$ROUNDS"); do
        t0=$(cpu)
        j=$("$sema" bench --json -m get --path "$path" -s "http://$addr" -c 4 -d "${SECS}s" 2>>"$tmp/bench.err")
        r=$(per_request "$j" "$t0" "$(cpu)")
        us=${r%% *}
        if [ -z "$best" ] || python3 -c "import sys; sys.exit(0 if $us < $best else 1)"; then best=$us; fi
    done
    req_us[$name]=$best
    echo "figure request_cpu_$name path=$path server_cpu_us_per_request=$best"
done
python3 - "${req_us[healthz]}" "${req_us[list50]}" "${req_us[state1000]}" "${req_us[metrics]}" <<'PY'
import sys
h, l, s, m = (float(x) for x in sys.argv[1:5])
print("ratio list50_vs_healthz value=%.2f" % (l / h))
print("ratio state1000_vs_healthz value=%.2f" % (s / h))
# an overview tab: a page of 50 and /healthz every 2 s
print("figure overview_tab server_cpu_us_per_s=%.1f" % ((l + h) / 2))
# a semaphore tab on a semaphore with 1,000 waiters while its events come: its state at most
# twice a second, /metrics every 15 s (the stream's own cost is in the pairs below)
print("figure busy_semaphore_tab_reads server_cpu_us_per_s=%.1f" % (2 * s + m / 15))
PY

# pairs on a semaphore followed by 0, 1, 10 tabs
declare -A best_cpu best_ops
"$sema" bench --json -s "http://$addr" -c "$CONNS" -d 1s --name watched --no-create >/dev/null 2>&1
for _ in $(seq "$ROUNDS"); do
    for tabs in 0 1 10; do
        if [ "$tabs" -gt 0 ]; then
            python3 "$here/dashboard_tabs.py" "$addr" semaphore watched "$tabs" "$((SECS + 2))" \
                >>"$tmp/tabs.log" 2>&1 &
            tp=$!
            sleep 1 # the streams open (a second of the tabs' own cost falls outside the run)
        fi
        t0=$(cpu)
        j=$("$sema" bench --json -s "http://$addr" -c "$CONNS" -d "${SECS}s" --name watched --no-create 2>>"$tmp/bench.err")
        r=$(per_request "$j" "$t0" "$(cpu)")
        [ "$tabs" -gt 0 ] && wait "$tp"
        read -r us ops n <<<"$r"
        us_pair=$(python3 -c "print('%.2f' % ($us * 2))") # two requests a pair
        if [ -z "${best_cpu[$tabs]:-}" ] || python3 -c "import sys; sys.exit(0 if $us_pair < ${best_cpu[$tabs]} else 1)"; then
            best_cpu[$tabs]=$us_pair
            best_ops[$tabs]=$ops
        fi
    done
done
for tabs in 0 1 10; do
    echo "figure pairs_with_${tabs}_tabs pairs_per_s=${best_ops[$tabs]} server_cpu_us_per_pair=${best_cpu[$tabs]}"
done
for tabs in 1 10; do
    python3 -c "print('ratio cpu_per_pair_${tabs}_tabs_vs_none value=%.3f' % (${best_cpu[$tabs]} / ${best_cpu[0]}))"
done
tail -n 1 "$tmp/tabs.log" | sed 's/^/# the last run of the tabs: /'
