#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - the CTest entry of the dashboard's browser test (dashboard.browser): drives
# Debian's chromium headless with puppeteer-core against real semad processes ($SEMAD,
# default build/bin/semad; $SEMA_BIN for `sema token new`). The npm packages come from the
# committed package-lock.json (scripts/deps.sh test installs them). Exit 77 (skip) without
# Node.js >= 18, chromium or the installed packages.
set -eu
cd "$(dirname "$0")"

if ! command -v node >/dev/null 2>&1; then
    echo "SKIP: node is missing" >&2
    exit 77
fi
if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 18 ]; then
    echo "SKIP: node $(node --version) is older than 18" >&2
    exit 77
fi
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
    echo "SKIP: no chromium at $chromium (scripts/deps.sh test installs it)" >&2
    exit 77
fi
if [ ! -d node_modules/puppeteer-core ] || [ ! -d node_modules/axe-core ]; then
    echo "SKIP: npm packages missing: run scripts/deps.sh test" >&2
    exit 77
fi
exec timeout 280 node dashboard.test.mjs
