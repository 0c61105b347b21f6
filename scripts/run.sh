#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - what `make run` starts: semad on its embedded default (SQLite in ./sema-data,
# strict durability) at http://127.0.0.1:7070. SEMA_* variables change any flag
# (see `build/bin/semad --help`).
set -eu
build=${1:-build}
listen=${SEMA_LISTEN:-127.0.0.1:7070}
echo "semad: serving http://$listen/ (data in ${SEMA_DATA:-./sema-data}); Ctrl-C stops it" >&2
echo "try:   curl -X PUT http://$listen/v1/semaphores/demo -d '{\"capacity\":2}'" >&2
exec "$build/bin/semad" --listen "$listen"
