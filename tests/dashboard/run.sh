#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - the CTest entry of the dashboard's browser test (dashboard.browser): drives
# Debian's chromium headless with puppeteer-core against real semad processes ($SEMAD,
# default build/bin/semad; $SEMA_BIN for `sema token new`). The npm packages come from the
# committed package-lock.json (scripts/deps.sh test installs them). Exit 77 (skip) without
# Node.js >= 18, chromium or the installed packages.
set -eu
cd "$(dirname "$0")"
# shellcheck source=tests/support/need_chromium.sh
. ../support/need_chromium.sh
need_chromium puppeteer-core axe-core
exec timeout 280 node dashboard.test.mjs
