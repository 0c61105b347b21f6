#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_install.sh - `cmake --install` into a temporary prefix, then build a tiny program
# against the installed copy with `pkg-config --cflags --libs sema`, and with CMake's
# find_package(sema), and run both.
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
if ldd "$tmp/hello_static" | grep -q libsema; then
    echo "static build still links libsema.so" >&2
    exit 1
fi
"$tmp/hello_static"

mkdir -p "$tmp/cm"
cat > "$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(hello C)
find_package(sema REQUIRED)
add_executable(hello ../hello.c)
target_link_libraries(hello PRIVATE sema::sema)
CM
cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_C_FLAGS="$san" \
    -DCMAKE_EXE_LINKER_FLAGS="$san" >/dev/null
cmake --build "$tmp/cm/build" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/cm/build/hello"
echo "install test: ok"
