#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - what `make run` starts: semad on its embedded default.
set -eu
build=${1:-build}
if [ -x "$build/bin/semad" ]; then
    listen=${SEMA_LISTEN:-127.0.0.1:7070}
    echo "semad: serving http://$listen/ (data in ${SEMA_DATA:-./sema-data}); Ctrl-C stops it" >&2
    exec "$build/bin/semad" --listen "$listen"
fi
echo "semad is not built yet; running the libsema demo instead" >&2
exec "$build/bin/sema_demo"
