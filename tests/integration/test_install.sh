#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_install.sh - `cmake --install` into a temporary prefix, then build a tiny program
# against the installed copy with `pkg-config --cflags --libs sema`, and with CMake's
# find_package(sema), and run both; the same for the HTTP client (sema-client.pc,
# sema::client): a program that makes a client handle and frees it (no server needed).
set -euo pipefail
build=${SEMA_BUILD_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib* | head -n 1)

test -f "$tmp/prefix/include/sema/sema.h"
test -f "$libdir/libsema.a"
ls "$libdir"/libsema.so.* >/dev/null
soname=$(objdump -p "$libdir/libsema.so" | awk '/SONAME/ {print $2}')
[[ $soname == libsema.so.0 ]] || { echo "unexpected SONAME: $soname" >&2; exit 1; }

# A sanitized libsema needs its runtime in the program too.
san=""
[ -n "${SEMA_SANITIZE:-}" ] && san="-fsanitize=$SEMA_SANITIZE"

cat > "$tmp/hello.c" <<'C'
#include <stdio.h>
#include <sema/sema.h>
int main(void)
{
    printf("sema %s: %s\n", sema_version(), sema_strerror(SEMA_EBUSY));
    return sema_strerror(SEMA_EBUSY)[0] == '\0';
}
C
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
cc $san -o "$tmp/hello" "$tmp/hello.c" $(pkg-config --cflags --libs sema) -Wl,-rpath,"$libdir"
"$tmp/hello"
# shellcheck disable=SC2046
cc $san -o "$tmp/hello_static" "$tmp/hello.c" $(pkg-config --cflags sema) "$libdir/libsema.a" \
    $(pkg-config --libs-only-other --static sema) -lrt
# (grep reads all of ldd's output: with -q it could exit first, and under pipefail the
# pipeline would then fail with SIGPIPE whatever it found)
if ldd "$tmp/hello_static" | grep libsema >/dev/null; then
    echo "static build still links libsema.so" >&2
    exit 1
fi
"$tmp/hello_static"

# Build $tmp/PROG.c with CMake's find_package(sema), linked with TARGET, and run it.
cmake_build_run() {
    local prog=$1 target=$2
    mkdir -p "$tmp/cm-$prog"
    printf '%s\n' "cmake_minimum_required(VERSION 3.25)" "project($prog C)" \
        "find_package(sema REQUIRED)" "add_executable($prog ../$prog.c)" \
        "target_link_libraries($prog PRIVATE $target)" > "$tmp/cm-$prog/CMakeLists.txt"
    cmake -S "$tmp/cm-$prog" -B "$tmp/cm-$prog/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
        -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >/dev/null
    cmake --build "$tmp/cm-$prog/build" >/dev/null
    LD_LIBRARY_PATH="$libdir" "$tmp/cm-$prog/build/$prog"
}
cmake_build_run hello sema::sema

# libsema-client: installed, found by pkg-config and by find_package(sema) as sema::client.
test -f "$tmp/prefix/include/sema/client.h"
test -f "$tmp/prefix/share/bash-completion/completions/sema"
test -f "$libdir/pkgconfig/sema-client.pc"
test -f "$libdir/cmake/sema/semaClientTargets.cmake"
cat > "$tmp/client.c" <<'C'
#include <stdio.h>
#include <sema/client.h>
int main(void)
{
    sema_client_t *c = NULL;
    int rc = sema_client_new(&c, "http://127.0.0.1:1", NULL);
    if (rc != 0 || c == NULL) {
        printf("sema_client_new: %s\n", sema_strerror(rc));
        return 1;
    }
    sema_client_free(c);
    rc = sema_client_new(&c, "not a url", NULL);
    printf("sema-client %s: bad url -> %s\n", sema_version(), sema_strerror(rc));
    return rc == 0;
}
C
pkg-config --exists --print-errors sema-client
pkg-config --static --libs sema-client >/dev/null  # Requires.private names resolve
# shellcheck disable=SC2046
cc $san -o "$tmp/client" "$tmp/client.c" $(pkg-config --cflags --libs sema-client) \
    -Wl,-rpath,"$libdir"
ldd "$tmp/client" | grep "$libdir/libsema-client.so" >/dev/null || {
    echo "the client program does not use the installed libsema-client.so" >&2
    exit 1
}
"$tmp/client"
# The static client as docs/client.md says to link it (libcurl and jansson stay shared).
# shellcheck disable=SC2046
cc $san -o "$tmp/client_static" "$tmp/client.c" $(pkg-config --cflags sema-client) \
    -L"$(pkg-config --variable=libdir sema-client)" -Wl,-Bstatic -lsema-client -lsema \
    -Wl,-Bdynamic $(pkg-config --libs libcurl jansson) -pthread -lrt
if ldd "$tmp/client_static" | grep libsema >/dev/null; then
    echo "the static client build still links a libsema shared library" >&2
    exit 1
fi
"$tmp/client_static"
cmake_build_run client sema::client

# semad's systemd unit names the installed semad; systemd's own checker (where the machine
# has it) finds nothing to say about it, and rates its exposure low.
unit="$tmp/prefix/lib/systemd/system/semad.service"
if [ -x "$tmp/prefix/bin/semad" ]; then
    grep -qx "ExecStart=$tmp/prefix/bin/semad" "$unit" || {
        echo "$unit does not start $tmp/prefix/bin/semad" >&2
        exit 1
    }
    grep -qx "Type=notify" "$unit"
    if command -v systemd-analyze >/dev/null; then
        said=$(systemd-analyze verify --man=no "$unit" 2>&1) || true
        [ -z "$said" ] || { echo "systemd-analyze verify: $said" >&2; exit 1; }
        exposure=$(systemd-analyze security --offline=yes --no-pager "$unit" 2>&1 |
            sed -n 's/.*Overall exposure level for semad.service: \([0-9.]*\).*/\1/p')
        awk -v e="$exposure" 'BEGIN { exit !(e != "" && e <= 2.5) }' || {
            echo "semad.service exposure level ${exposure:-unknown}, above 2.5" >&2
            exit 1
        }
    else
        echo "systemd-analyze not found: the unit's syntax is not checked here"
    fi
fi
echo "install test: ok"
