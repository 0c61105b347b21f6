# SPDX-License-Identifier: MIT
# need_chromium.sh - what a browser test needs, sourced by its run.sh: Node.js >= 18, Debian's
# chromium ($CHROMIUM, default /usr/bin/chromium) and the npm packages its lock file names.
# `need_chromium PACKAGE...` exits 77 (CTest's skip) saying what is missing; run it in the
# directory of the test's package.json.
need_chromium() {
    if ! command -v node >/dev/null 2>&1; then
        echo "SKIP: node is missing" >&2
        exit 77
    fi
    if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 18 ]; then
        echo "SKIP: node $(node --version) is older than 18" >&2
        exit 77
    fi
    local chromium=${CHROMIUM:-/usr/bin/chromium} p
    if [ ! -x "$chromium" ]; then
        echo "SKIP: no chromium at $chromium (scripts/deps.sh test installs it)" >&2
        exit 77
    fi
    for p in "$@"; do
        if [ ! -d "node_modules/$p" ]; then
            echo "SKIP: npm packages missing ($p): run scripts/deps.sh test" >&2
            exit 77
        fi
    done
}
