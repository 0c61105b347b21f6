#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - runs the Python client's pytest suites (the arguments: files, -k, -v ...) with the
# interpreter that has pytest. Debian's python3-pytest installs for /usr/bin/python3, which
# a pyenv or other python3 first on PATH does not see: that one is tried first, then
# python3 from PATH. The client itself needs nothing beyond the standard library.
set -eu
cd "$(dirname "$0")/.."
for py in /usr/bin/python3 "$(command -v python3 || true)"; do
    if [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import pytest' 2>/dev/null; then
        # no cache directory in the source tree; tracebacks short enough for a CTest log
        exec "$py" -m pytest -p no:cacheprovider --tb=short -ra "$@"
    fi
done
echo "pytest is missing: scripts/deps.sh test installs Debian's python3-pytest" >&2
exit 1
