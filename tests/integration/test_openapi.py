# SPDX-License-Identifier: MIT
"""test_openapi.py - docs/openapi.yaml and docs/http-api.md against the server's route table
(`semad --routes`): every route documented, nothing documented that the server lacks."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402

SRC = os.environ.get("SEMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
METHODS = {"get", "put", "post", "patch", "delete", "head", "options"}


def route_table():
    out = subprocess.run([fx.semad_path(), "--routes"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    routes = set()
    for line in out.splitlines():
        method, pattern = line.split()[:2]
        routes.add((method.upper(), pattern))
    assert len(routes) >= 21, out
    return routes


def openapi_routes(path):
    """(METHOD, path) pairs from the `paths:` section (indentation: 2 for a path, 4 for a
    method); a small reader for the subset of YAML that file uses (stdlib only)."""
    routes, in_paths, cur = set(), False, None
    with open(path) as f:
        for line in f:
            if re.match(r"^\S", line):
                in_paths = line.startswith("paths:")
                continue
            if not in_paths:
                continue
            m = re.match(r"^  (/\S*):\s*$", line)
            if m:
                cur = m.group(1)
                continue
            m = re.match(r"^    ([a-z]+):", line)
            if m and m.group(1) in METHODS:
                routes.add((m.group(1).upper(), cur))
    return routes


def test_openapi_matches_route_table():
    server = route_table()
    doc = openapi_routes(os.path.join(SRC, "docs", "openapi.yaml"))
    assert server - doc == set(), "routes missing from openapi.yaml: %s" % sorted(server - doc)
    assert doc - server == set(), "openapi.yaml documents unknown routes: %s" % sorted(
        doc - server)
    with open(os.path.join(SRC, "docs", "openapi.yaml")) as f:
        assert re.search(r"^openapi: 3\.1\.\d+$", f.read(), re.M), "not OpenAPI 3.1"


def openapi_rights(path):
    """{(METHOD, path): x-sema-right} from the `paths:` section."""
    rights, in_paths, cur, op = {}, False, None, None
    with open(path) as f:
        for line in f:
            if re.match(r"^\S", line):
                in_paths = line.startswith("paths:")
                continue
            m = re.match(r"^  (/\S*):\s*$", line)
            if in_paths and m:
                cur = m.group(1)
            m = re.match(r"^    ([a-z]+):", line)
            if in_paths and m and m.group(1) in METHODS:
                op = (m.group(1).upper(), cur)
            m = re.match(r"^      x-sema-right: (\S+)$", line)
            if in_paths and m:
                rights[op] = m.group(1)
    return rights


def test_openapi_rights_match_route_table():
    """Each operation's x-sema-right is the right `semad --routes` says the route needs."""
    out = subprocess.run([fx.semad_path(), "--routes"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    server = {(ln.split()[0], ln.split()[1]): ln.split()[2] for ln in out.splitlines()}
    doc = openapi_rights(os.path.join(SRC, "docs", "openapi.yaml"))
    assert doc == server, "x-sema-right differs: %s" % sorted(set(doc.items()) ^ set(server.items()))


def test_http_api_md_documents_every_route():
    with open(os.path.join(SRC, "docs", "http-api.md")) as f:
        text = f.read()
    missing = [m + " " + p for m, p in sorted(route_table())
               if not re.search(r"^#+ .*`%s %s`" % (m, re.escape(p)), text, re.M)]
    assert not missing, "docs/http-api.md lacks a section for: %s" % missing


if __name__ == "__main__":
    fx.main(globals())
