#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - the CTest entry of the waiting-room example (example.waiting_room): builds the JS
# client it uses when needed, then drives 20 pages in Debian's chromium (headless) against a
# real semad ($SEMAD, default build/bin/semad). The npm packages come from the committed
# package-lock.json (scripts/deps.sh test installs them). Exit 77 (skip) without Node.js >= 18,
# chromium or the installed packages.
set -eu
cd "$(dirname "$0")/.."

# shellcheck source=tests/support/need_chromium.sh
. ../../tests/support/need_chromium.sh
need_chromium puppeteer-core
if [ ! -x ../../clients/js/node_modules/.bin/tsc ]; then
    echo "SKIP: npm packages missing: run scripts/deps.sh test" >&2
    exit 77
fi
# The example imports @sema/client from ../../clients/js (a file: dependency): build it.
if [ ! -f ../../clients/js/dist/index.js ] ||
    [ -n "$(find ../../clients/js/src -newer ../../clients/js/dist/index.js -name '*.ts')" ]; then
    (cd ../../clients/js && npm run --silent build)
fi
exec timeout 200 node test/browser.test.mjs
