#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# check-source.sh - sema's source rules: no unbounded or unchecked libc string calls,
# an SPDX line at the top of every C file.
set -u
top=${1:-.}
cd "$top" || exit 2
status=0
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find src include tests bench fuzz -name '*.[ch]')
for f in $files; do
    [ -f "$f" ] || continue
    if grep -nE '(^|[^_a-zA-Z0-9.>])(sprintf|vsprintf|strcpy|strcat|atoi|atol|strtok|gets)[[:space:]]*\(' "$f"; then
        echo "$f: banned function (use snprintf, memcpy with a length, strtol, strtok_r)" >&2
        status=1
    fi
    if ! head -n 2 "$f" | grep -q 'SPDX-License-Identifier'; then
        echo "$f: missing SPDX-License-Identifier line at the top" >&2
        status=1
    fi
done
[ $status -eq 0 ] && echo "source check: ok"
exit $status
