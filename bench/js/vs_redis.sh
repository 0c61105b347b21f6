#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# vs_redis.sh - the Node.js client against semad beside redis-semaphore (npm) against a real
# redis-server, in one run on one machine: acquire+release pairs/s and p99 with 50 concurrent
# holders from one Node process each (bench/js/pairs.mjs on the client's node:http transport
# and on fetch, bench/peers/redis_sem.js).
#
# Usage: bench/js/vs_redis.sh [BUILD] [SECONDS]   (defaults: build, 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
secs=${2:-3}
command -v redis-server >/dev/null || { echo "vs_redis: redis-server is needed" >&2; exit 1; }
if [ ! -d bench/peers/node_modules/redis-semaphore ]; then
    (cd bench/peers && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
if [ ! -f clients/js/dist/index.js ]; then
    (cd clients/js && npm ci --no-audit --no-fund --loglevel=error >&2 && npm run build >&2)
fi

# The client on its default transport (node:http), then on fetch; each beside raw requests
# on the same transport.
node bench/js/pairs.mjs --semad "$build/bin/semad" --holders 50 --seconds "$secs" --rounds 3 --transport node
node bench/js/pairs.mjs --semad "$build/bin/semad" --holders 50 --seconds "$secs" --rounds 3 --transport fetch

tmp=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" \
    >/dev/null 2>&1 &
rpid=$!
trap 'kill $rpid 2>/dev/null; wait $rpid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do
    redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
    sleep 0.1
done
echo "redis-semaphore $(node -p 'require("./bench/peers/node_modules/redis-semaphore/package.json").version') on redis-server $(redis-server --version | grep -o 'v=[0-9.]*'):"
node bench/peers/redis_sem.js --redis "127.0.0.1:$port" -c 50 -d "$secs"
