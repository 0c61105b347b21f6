#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# deps.sh - install the Debian packages sema needs to build, test and benchmark (the Python
# client's tests: pytest, mypy, and pip, setuptools and venv to build and install its wheel
# without a download; its benchmark: redis-py), and (test,
# bench) the pinned npm packages of tests/openapi (the validating proxy of the HTTP tests
# and Redocly's OpenAPI linter), of clients/js (the JS client's dev dependencies:
# typescript, @types/node), of examples/waiting-room (puppeteer-core, which drives
# Debian's chromium in its test), and of tests/dashboard (puppeteer-core and axe-core: the
# dashboard's browser test and its accessibility scan).
#
# Usage: scripts/deps.sh [build|test|bench|fuzz]   (default: test)
# As root it runs apt-get; otherwise it prints the exact command and exits 1.
set -eu

want=${1:-test}
root=$(cd "$(dirname "$0")/.." && pwd)

build_pkgs="build-essential cmake pkg-config libuv1-dev node-llhttp libjansson-dev
            libsqlite3-dev libhiredis-dev libcurl4-openssl-dev libssl-dev"
test_pkgs="python3 sqlite3 redis-server redis-sentinel procps util-linux iproute2 nodejs npm openssl curl jq chromium
           python3-pytest mypy python3-venv python3-pip python3-setuptools python3-wheel"
bench_pkgs="wrk python3-redis"
fuzz_pkgs="clang libclang-rt-14-dev"

case $want in
build) pkgs=$build_pkgs ;;
test) pkgs="$build_pkgs $test_pkgs" ;;
bench) pkgs="$build_pkgs $test_pkgs $bench_pkgs" ;;
fuzz) pkgs="$build_pkgs $fuzz_pkgs" ;;
*) echo "usage: $0 [build|test|bench|fuzz]" >&2; exit 2 ;;
esac

# Node.js may come from elsewhere than Debian (NodeSource's nodejs has npm inside and
# conflicts with Debian's npm package): for these two a working command is enough.
installed() {
    case $1 in
    nodejs) command -v node >/dev/null 2>&1 ;;
    npm) command -v npm >/dev/null 2>&1 ;;
    *) dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed' ;;
    esac
}

missing=""
for p in $pkgs; do
    installed "$p" || missing="$missing $p"
done

if [ -n "$missing" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "sema needs these Debian packages:$missing" >&2
        echo "install them with:  sudo apt-get install -y$missing" >&2
        exit 1
    fi
    echo "installing Debian packages:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || true
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

[ "$want" = build ] || [ "$want" = fuzz ] && exit 0

# `npm ci` in DIR from its committed package-lock.json, again whenever the lock changed (a
# copy of it beside node_modules says what is installed) or the command BIN is missing.
npm_ci() {
    local dir=$root/$1 bin=$2 stamp=$root/$1/node_modules/.sema-installed-lock
    if ! cmp -s "$dir/package-lock.json" "$stamp" 2>/dev/null || [ ! -x "$dir/node_modules/.bin/$bin" ]; then
        echo "installing the npm packages of $1 (npm ci)" >&2
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
        cp "$dir/package-lock.json" "$stamp"
    fi
}

npm_ci tests/openapi prism # the validating proxy of the HTTP tests, and the OpenAPI linter
npm_ci clients/js tsc      # the JS client's build and tests (ctest js.client)
npm_ci examples/waiting-room browsers # puppeteer-core: the waiting room's browser test
npm_ci tests/dashboard browsers       # puppeteer-core, axe-core: the dashboard's browser test
# the peers of bench/peers/run.sh and bench/js (Node-RED, redis-semaphore, ioredis)
if [ "$want" = bench ]; then npm_ci bench/peers node-red; fi
