#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check-layers.py - the folders of src/ are layers, and an #include only goes down.

Each folder may include its own headers, the public headers (include/sema/), and the
folders listed for it below; anything else is an arrow up (or sideways) and fails. The
table is the picture of docs/architecture.md. Also fails on a .c file of more than 1,000
lines. Usage: check-layers.py [SOURCE_DIR] [--graph]  (--graph prints the folder graph).
"""
import os
import re
import sys

# folder -> the folders it may include (besides itself and include/sema/)
MAY_INCLUDE = {
    "lib": [],
    "common": [],
    "client": [],
    "store": ["common"],
    "engine": ["common"],
    "backends": ["engine", "common"],
    "backends/embedded": ["backends", "engine", "store", "common"],
    "backends/redis": ["backends", "engine", "common"],
    "http": ["engine", "common"],
    "semad": ["http", "backends", "engine", "store", "common"],
    "loadgen": ["client", "common"],
    "cli": ["loadgen", "client", "common"],
}
MAX_C_LINES = 1000
# Files still over MAX_C_LINES, each with the work that splits it. Empty it, do not grow it.
OVERSIZE = {}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(rel):
    """The layer a path under src/ belongs to ("backends/redis", "http", ...)."""
    parts = rel.split("/")
    if parts[0] == "backends" and len(parts) > 2:
        return "backends/" + parts[1]
    return parts[0]


def target_of(inc, own):
    """The layer an #include names: its folder from src/, or the file's own folder."""
    if inc.startswith("sema/"):
        return None  # a public header
    head = inc.rsplit("/", 1)[0] if "/" in inc else None
    if head is None:
        return own  # a bare name: the file's own folder (libsema's private headers)
    return head if head in MAY_INCLUDE else folder_of(inc)


def scan(src):
    edges, bad, big = {}, [], []
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            own = folder_of(rel)
            text = open(path, encoding="utf-8").read()
            if name.endswith(".c") and text.count("\n") > MAX_C_LINES and rel not in OVERSIZE:
                big.append("%s: %d lines (at most %d)" % (rel, text.count("\n"), MAX_C_LINES))
            for inc in INCLUDE.findall(text):
                to = target_of(inc, own)
                if to is None or to == own:
                    continue
                edges.setdefault(own, set()).add(to)
                if own not in MAY_INCLUDE or to not in MAY_INCLUDE[own]:
                    bad.append('%s includes "%s": %s may not depend on %s' % (rel, inc, own, to))
    return edges, bad, big


def circles(edges):
    """Folder circles (strongly connected components of more than one folder)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    top = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
    edges, bad, big = scan(os.path.join(top, "src"))
    if "--graph" in sys.argv:
        for v in sorted(edges):
            print("%s -> %s" % (v, ", ".join(sorted(edges[v]))))
    problems = bad + big + ["a circle of folders: " + " <-> ".join(c) for c in circles(edges)]
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print("layers: ok (%d folders, every #include goes down)" % len(MAY_INCLUDE))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
