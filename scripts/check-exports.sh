#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# check-exports.sh - a shared library of sema's exports only sema_* symbols.
set -u
lib=${1:?usage: check-exports.sh LIB.so}
[ -f "$lib" ] || { echo "no such library: $lib" >&2; exit 1; }
bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v '^sema_' || true)
if [ -n "$bad" ]; then
    echo "$lib exports symbols without the sema_ prefix:" >&2
    echo "$bad" >&2
    exit 1
fi
echo "exports of $(basename "$lib"): $(nm -D --defined-only "$lib" | grep -c ' sema_') sema_* symbols, nothing else"
