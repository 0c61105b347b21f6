#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# deps.sh - install the Debian packages sema needs to build, test and benchmark.
#
# Usage: scripts/deps.sh [build|test|bench]   (default: test)
# As root it runs apt-get; otherwise it prints the exact command and exits 1.
set -eu

want=${1:-test}

build_pkgs="build-essential cmake pkg-config libuv1-dev node-llhttp libjansson-dev
            libsqlite3-dev libhiredis-dev libcurl4-openssl-dev"
test_pkgs="python3 sqlite3 redis-server procps util-linux"
bench_pkgs="wrk"

case $want in
build) pkgs=$build_pkgs ;;
test) pkgs="$build_pkgs $test_pkgs" ;;
bench) pkgs="$build_pkgs $test_pkgs $bench_pkgs" ;;
*) echo "usage: $0 [build|test|bench]" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

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
