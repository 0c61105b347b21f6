#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# lint.sh - docs/openapi.yaml under Redocly's OpenAPI linter (its recommended rules, pinned in
# package.json): the test fails on any error. `scripts/deps.sh test` installs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
redocly=$here/node_modules/.bin/redocly
if [ ! -x "$redocly" ]; then
    echo "lint.sh: $redocly is missing: scripts/deps.sh test installs it (npm ci in tests/openapi)" >&2
    exit 1
fi
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
exec "$redocly" lint --format=stylish "$here/../../docs/openapi.yaml"
