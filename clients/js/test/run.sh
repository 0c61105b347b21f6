#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - the CTest entry of the JS client (js.client): installs the dev dependencies from
# the committed package-lock.json when needed, builds the package, its tests and the
# README's examples (tsc type-checks all three), and runs `node --test` against the semad
# in $SEMAD (default build/bin/semad) twice: on the node:http transport and on fetch.
# Exit 77 (skip) without Node.js >= 18 or npm.
set -eu
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "SKIP: node or npm is missing" >&2
    exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
    echo "SKIP: node $(node --version) is older than 18" >&2
    exit 77
fi
if [ -n "${SEMAD:-}" ] && [ ! -x "$SEMAD" ]; then
    echo "no semad at $SEMAD" >&2
    exit 1
fi

# `npm ci` when node_modules is missing or was installed from another lock.
stamp=node_modules/.sema-installed-lock
if [ ! -x node_modules/.bin/tsc ] || ! cmp -s package-lock.json "$stamp"; then
    npm ci --no-audit --no-fund --loglevel=error >&2
    cp package-lock.json "$stamp"
fi

npm run --silent build
npm run --silent build:test
npm run --silent typecheck:examples   # tsc --noEmit
npm run --silent build:examples
# The suite once per transport (SEMA_JS_TRANSPORTS="node" runs one).
for transport in ${SEMA_JS_TRANSPORTS:-node fetch}; do
    echo "# transport: $transport"
    SEMA_TRANSPORT=$transport node --test dist-test/test/
done
