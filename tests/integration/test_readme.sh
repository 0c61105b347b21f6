#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_readme.sh - every C example in README.md compiles against the built libsema and runs.
set -euo pipefail
src=${SEMA_SOURCE_DIR:?}
build=${SEMA_BUILD_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$src/README.md" "$tmp" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```c\n(.*?)```", text, re.S)
if not blocks:
    sys.exit("README.md has no C examples")
for i, b in enumerate(blocks):
    open(f"{sys.argv[2]}/example{i}.c", "w").write(b)
print(f"{len(blocks)} C examples")
PY
san=()
[ -n "${SEMA_SANITIZE:-}" ] && san=(-fsanitize="$SEMA_SANITIZE")
for c in "$tmp"/example*.c; do
    cc -std=c11 -Wall -Wextra -Werror "${san[@]}" -I"$src/include" -o "${c%.c}" "$c" \
        "$build/lib/libsema.a" -pthread -lrt
    echo "== $(basename "$c")"
    "${c%.c}"
done
