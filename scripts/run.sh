#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - what `make run` starts: semad on its embedded default (SQLite in ./sema-data,
# strict durability) at http://127.0.0.1:7070. SEMA_* variables change any flag
# (see `build/bin/semad --help`): SEMA_LISTEN=127.0.0.1:7080 make run serves on port 7080.
# The banner comes once semad says it is ready (a port in use gets semad's reason alone).
set -eu
build=${1:-build}
listen=${SEMA_LISTEN:-127.0.0.1:7070}
data=${SEMA_DATA:-./sema-data}
# semad's log goes on to stderr as it is; after its "ready" line, how to use it. The filter
# ignores Ctrl-C, which stops semad, so that semad's last lines are shown too.
banner() {
    trap '' INT
    local line shown=
    while IFS= read -r line; do
        printf '%s\n' "$line"
        if [ -z "$shown" ] && [[ $line == *" ready "* ]]; then
            shown=1
            echo "semad: serving http://$listen/ (data in $data); Ctrl-C stops it"
            echo "       another address: SEMA_LISTEN=127.0.0.1:7080 make run"
            echo "try:   curl -X PUT http://$listen/v1/semaphores/demo -d '{\"capacity\":2}'"
        fi
    done >&2
}
exec "$build/bin/semad" --listen "$listen" 2> >(banner)
