#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""multi_pairs.py - acquire+release pairs through semad, one after another on one connection,
on one semaphore (plain) or on two at once (multi: POST /v1/acquire with semaphores; tenant:
the same naming a tenant), for redis_fcall_ir.sh's MULTI=1 figures.

    multi_pairs.py plain|multi|tenant URL PAIRS"""
import http.client
import json
import sys
import urllib.parse


def main():
    mode, url, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)

    def call(method, path, body=None):
        c.request(method, path, json.dumps(body) if body is not None else None,
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status >= 300:
            sys.exit("%s %s: %d %s" % (method, path, r.status, data[:200]))
        return json.loads(data) if data else None

    for name in ("mp-a", "mp-b"):
        call("PUT", "/v1/semaphores/" + name, {"capacity": 1000})
    for _ in range(pairs):
        if mode in ("multi", "tenant"):
            body = {"semaphores": [{"name": "mp-a"}, {"name": "mp-b"}]}
            if mode == "tenant":
                body["tenant"] = "acme"
            lease = call("POST", "/v1/acquire", body)
        else:
            lease = call("POST", "/v1/semaphores/mp-a/acquire", {})
        call("DELETE", "/v1/leases/" + lease["lease"])


if __name__ == "__main__":
    main()
