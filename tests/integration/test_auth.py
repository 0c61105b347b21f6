# SPDX-License-Identifier: MIT
"""test_auth.py - semad --auth against the real server: every route with every right (allowed,
401 without or with a bad token, 403 with a token that lacks the right), name prefixes, leases
that belong to the token that took them (also across a restart), the token file's reload on
SIGHUP without dropping connections (a bad file keeps the tokens in use), the strict parser's
messages, protected mode, and the C client and `sema` sending $SEMA_TOKEN. Tokens are made
with `sema token new`, as an operator would."""
import json
import os
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402

SEMA = os.environ.get("SEMA_BIN") or os.path.join(fx.source_dir(), "build", "bin", "sema")
NO_LEASE = "AAAAAAAAAAAAAAAAAAAAAAAA"  # a well-formed id of no lease


def new_token(path, name, rights, *prefixes):
    cmd = [SEMA, "token", "new", name, "--rights", rights, "--file", path]
    for p in prefixes:
        cmd += ["--prefix", p]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    tok = p.stdout.strip()
    assert tok.startswith("sema_") and len(tok) == 48, tok
    with open(path) as f:
        assert tok not in f.read(), "the file must hold only the hash"
    return tok


def bearer(tok):
    return {"Authorization": "Bearer " + tok} if tok else {}


class Tokens:
    """A token file in a temp dir with one token per right set."""

    def __init__(self):
        self.dir = fx.temp_dir(prefix="sema-auth-")
        self.path = os.path.join(self.dir, "tokens")
        self.admin = new_token(self.path, "ops", "admin")
        self.read = new_token(self.path, "viewer", "read")
        self.acquire = new_token(self.path, "worker", "acquire")
        self.both = new_token(self.path, "ci", "read,acquire")


def req(s, method, path, tok=None, body=None, headers=None):
    h = bearer(tok)
    h.update(headers or {})
    st, hd, data = s.request(method, path, body, h)
    return st, hd, data


def is_problem(hd, data, status, code):
    assert hd.get("content-type", "").startswith("application/problem+json"), hd
    p = json.loads(data)
    assert p["status"] == status and p["code"] == code, p
    return p


# The right each route needs: also what `semad --routes` says (checked below).
RIGHTS = {
    ("POST", "/semaphore"): "admin",
    ("POST", "/semaphore/up"): "acquire",
    ("POST", "/semaphore/down"): "acquire",
    ("GET", "/semaphore/value/{name}"): "read",
    ("DELETE", "/semaphore/{name}"): "admin",
    ("GET", "/v1/semaphores"): "read",
    ("PUT", "/v1/semaphores/{name}"): "admin",
    ("PATCH", "/v1/semaphores/{name}"): "admin",
    ("GET", "/v1/semaphores/{name}"): "read",
    ("DELETE", "/v1/semaphores/{name}"): "admin",
    ("POST", "/v1/semaphores/{name}/acquire"): "acquire",
    ("POST", "/v1/acquire"): "acquire",
    ("POST", "/v1/semaphores/{name}/wait-idle"): "acquire",
    ("GET", "/v1/semaphores/{name}/events"): "read",
    ("GET", "/v1/leases/{id}"): "read",
    ("DELETE", "/v1/leases/{id}"): "acquire",
    ("POST", "/v1/leases/{id}/renew"): "acquire",
    ("POST", "/v1/leases/{id}/revoke"): "admin",
    ("POST", "/v1/locks/{key}/acquire"): "acquire",
    ("GET", "/v1/locks/{key}"): "read",
    ("GET", "/v1/locks"): "read",
    ("POST", "/v1/semaphores/{name}/tickets"): "acquire",
    ("POST", "/v1/tickets"): "acquire",
    ("GET", "/v1/tickets/{id}"): "acquire",
    ("DELETE", "/v1/tickets/{id}"): "acquire",
    ("GET", "/v1/tickets/{id}/events"): "acquire",
    ("GET", "/healthz"): "open",
    ("GET", "/metrics"): "read",
    ("GET", "/ui"): "open",  # the dashboard holds no data: its page reads the API
    ("GET", "/ui/config.json"): "open",
    ("GET", "/ui/{file}"): "open",
}

def own_ticket(s, tok, admin):
    """A ticket on r taken by `tok` when it may take one, else by `admin`: the path of a
    ticket route reaches the ticket of the token that asks (another token's is refused)."""
    for t in (tok, admin):
        st, hd, data = req(s, "POST", "/v1/semaphores/r/tickets", t,
                           {"weight": 1, "keepalive_ms": 60000})
        if st == 201:
            return json.loads(data)["ticket"]
    raise AssertionError("no ticket: %d %r" % (st, data))


def ticket_path(suffix=""):
    return lambda s, tok, admin: "/v1/tickets/" + own_ticket(s, tok, admin) + suffix


# One request per route: (method, pattern, concrete path, body). A path that is a function
# is made per token (a ticket route needs a ticket of the token that asks).
REQUESTS = [
    ("POST", "/semaphore", "/semaphore", {"name": "Lnew", "value": 1}),
    ("POST", "/semaphore/up", "/semaphore/up", {"name": "L"}),
    ("POST", "/semaphore/down", "/semaphore/down", {"name": "L"}),
    ("GET", "/semaphore/value/{name}", "/semaphore/value/L", None),
    ("DELETE", "/semaphore/{name}", "/semaphore/nosuch", None),
    ("GET", "/v1/semaphores", "/v1/semaphores", None),
    ("PUT", "/v1/semaphores/{name}", "/v1/semaphores/r", {"capacity": 1000}),
    ("PATCH", "/v1/semaphores/{name}", "/v1/semaphores/r", {"capacity": 1000}),
    ("GET", "/v1/semaphores/{name}", "/v1/semaphores/r", None),
    ("DELETE", "/v1/semaphores/{name}", "/v1/semaphores/nosuch", None),
    ("POST", "/v1/semaphores/{name}/acquire", "/v1/semaphores/r/acquire",
     {"timeout_ms": 0, "ttl_ms": 60000}),
    ("POST", "/v1/acquire", "/v1/acquire",
     {"semaphores": [{"name": "r"}], "timeout_ms": 0, "ttl_ms": 60000}),
    ("POST", "/v1/semaphores/{name}/wait-idle", "/v1/semaphores/idle/wait-idle",
     {"timeout_ms": 0}),
    ("GET", "/v1/semaphores/{name}/events", "/v1/semaphores/r/events", None),
    ("GET", "/v1/leases/{id}", "/v1/leases/" + NO_LEASE, None),
    ("DELETE", "/v1/leases/{id}", "/v1/leases/" + NO_LEASE, None),
    ("POST", "/v1/leases/{id}/renew", "/v1/leases/%s/renew" % NO_LEASE, {"ttl_ms": 1000}),
    ("POST", "/v1/leases/{id}/revoke", "/v1/leases/%s/revoke" % NO_LEASE, None),
    ("POST", "/v1/locks/{key}/acquire", "/v1/locks/k/acquire",
     {"mode": "shared", "timeout_ms": 0}),
    ("GET", "/v1/locks/{key}", "/v1/locks/k", None),
    ("GET", "/v1/locks", "/v1/locks", None),
    ("POST", "/v1/semaphores/{name}/tickets", "/v1/semaphores/r/tickets",
     {"weight": 1, "keepalive_ms": 60000}),
    ("POST", "/v1/tickets", "/v1/tickets", {"semaphores": [{"name": "r"}], "keepalive_ms": 60000}),
    ("GET", "/v1/tickets/{id}", ticket_path(), None),
    ("DELETE", "/v1/tickets/{id}", ticket_path(), None),
    ("GET", "/v1/tickets/{id}/events", ticket_path("/events"), None),
    ("GET", "/healthz", "/healthz", None),
    ("GET", "/metrics", "/metrics", None),
    ("GET", "/ui", "/ui", None),
    ("GET", "/ui/config.json", "/ui/config.json", None),
    ("GET", "/ui/{file}", "/ui/app.js", None),
]


def status_of(s, method, path, tok, body):
    """The status of one request; an event stream's head is read on a raw socket."""
    if path.endswith("/events"):
        sock = s.raw(direct=True)
        try:
            h = "".join("%s: %s\r\n" % kv for kv in bearer(tok).items())
            sock.sendall(("GET %s HTTP/1.1\r\nHost: t\r\n%s\r\n" % (path, h)).encode())
            f = sock.makefile("rb")
            st = int(f.readline().split()[1])
            f.close()
            return st, None, None
        finally:
            sock.close()
    return req(s, method, path, tok, body)


def route_table_rights():
    out = subprocess.run([fx.semad_path(), "--routes"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return {tuple(line.split()[:2]): line.split()[2] for line in out.splitlines()}


def test_every_route_with_every_right():
    assert route_table_rights() == RIGHTS, "semad --routes and the rights tested differ"
    assert {(m, p) for m, p, _, _ in REQUESTS} == set(RIGHTS), "a route is not tested"
    t = Tokens()
    assert os.stat(t.path).st_mode & 0o777 == 0o600, "sema token new makes the file private"
    holders = {"admin": t.admin, "read": t.read, "acquire": t.acquire, "read,acquire": t.both}
    has = {"admin": {"admin", "read", "acquire"}, "read": {"read"}, "acquire": {"acquire"},
           "read,acquire": {"read", "acquire"}}
    failures = []
    with fx.Semad("--auth", t.path) as s:
        assert req(s, "PUT", "/v1/semaphores/r", t.admin, {"capacity": 1000})[0] in (200, 201)
        assert req(s, "PUT", "/v1/semaphores/idle", t.admin, {"capacity": 1})[0] == 201
        assert req(s, "POST", "/semaphore", t.admin, {"name": "L", "value": 100})[0] == 200
        for method, pattern, path, body in REQUESTS:
            need = RIGHTS[(method, pattern)]
            cases = [("no token", None, need == "open"), ("a bad token", "sema_nosuchtoken",
                                                          need == "open")]
            cases += [(r, tok, need == "open" or need in has[r]) for r, tok in holders.items()]
            for who, tok, allowed in cases:
                at = path(s, tok, t.admin) if callable(path) else path
                st, hd, data = status_of(s, method, at, tok, body)
                if callable(path) and allowed and not 200 <= st < 300:
                    failures.append("%s %s with %s: %d, want 2xx" % (method, at, who, st))
                want = "allowed" if allowed else ("401" if who in ("no token", "a bad token")
                                                  else "403")
                if allowed and st in (401, 403):
                    failures.append("%s %s with %s: %d, want it allowed" % (method, path, who, st))
                elif want == "401" and st != 401:
                    failures.append("%s %s with %s: %d, want 401" % (method, path, who, st))
                elif want == "403" and st != 403:
                    failures.append("%s %s with %s: %d, want 403" % (method, path, who, st))
                elif want == "401" and hd is not None:
                    assert hd["www-authenticate"].startswith("Bearer realm="), hd
                    p = is_problem(hd, data, 401, "unauthorized")
                    assert "'%s' right" % need in p["detail"], p
                elif want == "403" and hd is not None:
                    p = is_problem(hd, data, 403, "forbidden")
                    assert "lacks the '%s' right" % need in p["detail"], p
        # /healthz stays open, and semad counts what it refused
        assert req(s, "GET", "/healthz")[0] == 200
        metrics = req(s, "GET", "/metrics", t.read)[2].decode()
        assert 'status="401"' in metrics and 'status="403"' in metrics
    assert not failures, "\n  ".join(["rights:"] + failures)


def test_authorization_header_forms():
    t = Tokens()
    with fx.Semad("--auth", t.path) as s:
        ok = [("Bearer " + t.read), ("bearer " + t.read), ("BEARER   " + t.read),
              ("Bearer " + t.read + "  ")]
        for v in ok:
            assert req(s, "GET", "/v1/semaphores", headers={"Authorization": v})[0] == 200, v
        bad = ["Basic " + t.read, "Bearer", "Bearer ", "Bearer\t" + t.read, t.read,
               "Bearer " + t.read + " x", "Bearer " + t.read[:-1], "Bearer " + t.read + "x",
               "Bearer " + t.read.upper(), "Bearer a,b", "Bearer " + "a" * 201,
               "Token " + t.read]
        for v in bad:
            st, hd, data = req(s, "GET", "/v1/semaphores", headers={"Authorization": v})
            assert st == 401, (v, st)
            is_problem(hd, data, 401, "unauthorized")
            assert 'error="invalid_token"' in hd["www-authenticate"], hd


def test_prefix_limits():
    t = Tokens()
    jobs = new_token(t.path, "jobs", "read,acquire", "jobs/", "batch-")
    with fx.Semad("--auth", t.path) as s:
        for name in ("jobs%2Fa", "batch-1", "other"):
            assert req(s, "PUT", "/v1/semaphores/" + name, t.admin, {"capacity": 2})[0] == 201
        assert req(s, "POST", "/semaphore", t.admin, {"name": "legacy", "value": 1})[0] == 200
        st, body = s.json("POST", "/v1/semaphores/jobs%2Fa/acquire", {"timeout_ms": 0},
                          bearer(jobs))
        assert st == 200 and body["name"] == "jobs/a", body
        assert req(s, "POST", "/v1/semaphores/batch-1/acquire", jobs, {"timeout_ms": 0})[0] == 200
        assert req(s, "GET", "/v1/semaphores/jobs%2Fa", jobs)[0] == 200
        outside = [
            ("POST", "/v1/semaphores/other/acquire", {"timeout_ms": 0}),
            ("GET", "/v1/semaphores/other", None),
            ("POST", "/v1/semaphores/other/wait-idle", {"timeout_ms": 0}),
            ("GET", "/v1/semaphores/other/events", None),
            ("POST", "/v1/locks/other/acquire", {"mode": "shared", "timeout_ms": 0}),
            ("GET", "/v1/locks/other", None),
            ("GET", "/v1/semaphores", None),  # a list needs ?prefix= within the token's
            ("GET", "/v1/semaphores?prefix=job", None),
            ("GET", "/v1/locks", None),
            ("GET", "/v1/locks?prefix=other", None),
            ("POST", "/semaphore/up", {"name": "legacy"}),  # a name in a legacy body
            ("POST", "/semaphore/down", {"name": "legacy"}),
            ("GET", "/semaphore/value/legacy", None),
            ("GET", "/v1/semaphores/jobs", None),  # "jobs" is not under "jobs/"
        ]
        st, hd, data = req(s, "GET", "/metrics", jobs)  # metrics name every semaphore
        assert st == 403 and b"limited to name prefixes" in data, (st, data)
        for method, path, body in outside:
            st, hd, data = status_of(s, method, path, jobs, body)
            assert st == 403, (method, path, st, data)
            if hd is not None:
                p = is_problem(hd, data, 403, "forbidden")
                assert "'jobs/', 'batch-'" in p["detail"], p
        st, body = s.json("GET", "/v1/semaphores?prefix=jobs/", None, bearer(jobs))
        assert st == 200 and [x["name"] for x in body["semaphores"]] == ["jobs/a"], body
        assert s.json("GET", "/v1/locks?prefix=jobs/", None, bearer(jobs))[0] == 200
        # a lock key under the prefix, and a lease on a semaphore outside it is not shown
        assert req(s, "POST", "/v1/locks/jobs%2Fk/acquire", jobs,
                   {"mode": "shared", "timeout_ms": 0})[0] == 200
        st, other = s.json("POST", "/v1/semaphores/other/acquire", {"timeout_ms": 0},
                           bearer(t.admin))
        assert st == 200
        assert req(s, "GET", "/v1/leases/" + other["lease"], jobs)[0] == 403
        assert req(s, "GET", "/v1/leases/" + other["lease"], t.read)[0] == 200


def test_another_tokens_lease():
    t = Tokens()
    other = new_token(t.path, "worker2", "acquire,read")
    with fx.Semad("--auth", t.path) as s:
        assert req(s, "PUT", "/v1/semaphores/a", t.admin, {"capacity": 3})[0] == 201
        st, lease = s.json("POST", "/v1/semaphores/a/acquire",
                           {"timeout_ms": 0, "ttl_ms": 60000}, bearer(t.acquire))
        assert st == 200
        lid = lease["lease"]
        for method, path, body in [("DELETE", "/v1/leases/" + lid, None),
                                   ("POST", "/v1/leases/%s/renew" % lid, {"ttl_ms": 5000}),
                                   ("POST", "/v1/leases/%s/revoke" % lid, None)]:
            st, hd, data = req(s, method, path, other, body)
            assert st == 403, (method, st, data)
            p = is_problem(hd, data, 403, "forbidden")
            assert "another token" in p["detail"] or "'admin' right" in p["detail"], p
        # the same Idempotency-Key cannot hand one token another's lease
        key = {"Idempotency-Key": "k1"}
        st, _, _ = req(s, "POST", "/v1/semaphores/a/acquire", t.acquire, {"timeout_ms": 0}, key)
        assert st == 200
        st, hd, data = req(s, "POST", "/v1/semaphores/a/acquire", other, {"timeout_ms": 0}, key)
        assert st == 403, (st, data)
        # the lease is still there; its own token renews it, and an admin may end it
        st, got = s.json("GET", "/v1/leases/" + lid, None, bearer(t.read))
        assert st == 200 and got["lease"] == lid
        assert req(s, "POST", "/v1/leases/%s/renew" % lid, t.acquire, {"ttl_ms": 5000})[0] == 200
        assert req(s, "DELETE", "/v1/leases/" + lid, t.admin)[0] == 204
        st, lease = s.json("POST", "/v1/semaphores/a/acquire", {"timeout_ms": 0},
                           bearer(other))
        assert st == 200
        assert req(s, "DELETE", "/v1/leases/" + lease["lease"], other)[0] == 204


def test_tickets_belong_to_the_token_that_took_them():
    t = Tokens()
    other = new_token(t.path, "worker2", "acquire,read")
    with fx.Semad("--auth", t.path) as s:
        assert req(s, "PUT", "/v1/semaphores/q", t.admin, {"capacity": 1})[0] == 201
        st, held = s.json("POST", "/v1/semaphores/q/acquire", {"timeout_ms": 0, "ttl_ms": 60000},
                          bearer(t.acquire))
        assert st == 200
        key = {"Idempotency-Key": "tk1"}
        st, hd, data = req(s, "POST", "/v1/semaphores/q/tickets", t.acquire,
                           {"keepalive_ms": 60000}, key)
        assert st == 201, (st, data)
        tk = json.loads(data)
        assert tk["status"] == "waiting", tk
        tid = tk["ticket"]
        # another token without admin: 403 reading, streaming, deleting, or reusing its key
        for method, path in [("GET", "/v1/tickets/" + tid), ("GET", "/v1/tickets/%s?wait=1s" % tid),
                             ("DELETE", "/v1/tickets/" + tid)]:
            st, hd, data = req(s, method, path, other)
            assert st == 403, (method, path, st, data)
            p = is_problem(hd, data, 403, "forbidden")
            assert "another token" in p["detail"], p
        assert status_of(s, "GET", "/v1/tickets/%s/events" % tid, other, None)[0] == 403
        for path, body in [("/v1/semaphores/q/tickets", {"keepalive_ms": 60000}),
                           ("/v1/semaphores/q/acquire", {"timeout_ms": 0})]:
            st, hd, data = req(s, "POST", path, other, body, key)
            assert st == 403, (path, st, data)
            assert "another token" in is_problem(hd, data, 403, "forbidden")["detail"]
        # its own token's acquire with the ticket's key is a mismatch, not a refusal
        st, hd, data = req(s, "POST", "/v1/semaphores/q/acquire", t.acquire,
                           {"timeout_ms": 0}, key)
        assert st == 409, (st, data)
        # its own token reads it (and retries with the key); an admin reads it too
        st, got = s.json("GET", "/v1/tickets/" + tid, None, bearer(t.acquire))
        assert st == 200 and got["ticket"] == tid, got
        st, got = s.json("POST", "/v1/semaphores/q/tickets", {"keepalive_ms": 60000},
                         dict(bearer(t.acquire), **key))
        assert st == 200 and got["ticket"] == tid, got
        assert req(s, "GET", "/v1/tickets/" + tid, t.admin)[0] == 200
        # granted in its turn: the lease is the ticket's token's
        assert req(s, "DELETE", "/v1/leases/" + held["lease"], t.acquire)[0] == 204
        st, got = s.json("GET", "/v1/tickets/%s?wait=30s" % tid, None, bearer(t.acquire))
        assert st == 200 and got["status"] == "granted", got
        lid = got["lease"]["lease"]
        assert req(s, "DELETE", "/v1/leases/" + lid, other)[0] == 403
        assert req(s, "POST", "/v1/leases/%s/renew" % lid, other, {"ttl_ms": 5000})[0] == 403
        assert req(s, "POST", "/v1/leases/%s/renew" % lid, t.acquire, {"ttl_ms": 5000})[0] == 200
        # a ticket granted at once too; its own token leaves the line (and its lease ends)
        assert req(s, "DELETE", "/v1/tickets/" + tid, t.acquire)[0] == 204
        st, got = s.json("POST", "/v1/semaphores/q/tickets", {}, bearer(other))
        assert st == 201 and got["status"] == "granted", got
        assert req(s, "DELETE", "/v1/leases/" + got["lease"]["lease"], t.acquire)[0] == 403
        assert req(s, "DELETE", "/v1/tickets/" + got["ticket"], t.acquire)[0] == 403
        assert req(s, "DELETE", "/v1/tickets/" + got["ticket"], t.admin)[0] == 204


def test_ticket_token_survives_restart():
    t = Tokens()
    data = os.path.join(t.dir, "data")
    with fx.Semad("--auth", t.path, durability="strict", data=data) as s:
        assert req(s, "PUT", "/v1/semaphores/d", t.admin, {"capacity": 1})[0] == 201
        st, held = s.json("POST", "/v1/semaphores/d/acquire", {"timeout_ms": 0, "ttl_ms": 60000},
                          bearer(t.admin))
        assert st == 200
        st, got = s.json("POST", "/v1/semaphores/d/tickets", {"keepalive_ms": 60000},
                         bearer(t.acquire))
        assert st == 201 and got["status"] == "waiting", got
        tid = got["ticket"]
    other = new_token(t.path, "late", "acquire")
    with fx.Semad("--auth", t.path, durability="strict", data=data) as s:
        assert req(s, "GET", "/v1/tickets/" + tid, other)[0] == 403
        assert req(s, "DELETE", "/v1/leases/" + held["lease"], t.admin)[0] == 204
        st, got = s.json("GET", "/v1/tickets/%s?wait=30s" % tid, None, bearer(t.acquire))
        assert st == 200 and got["status"] == "granted", got
        assert req(s, "DELETE", "/v1/leases/" + got["lease"]["lease"], other)[0] == 403
        assert req(s, "DELETE", "/v1/tickets/" + tid, other)[0] == 403
        assert req(s, "DELETE", "/v1/tickets/" + tid, t.acquire)[0] == 204


def test_lease_token_survives_restart():
    t = Tokens()
    data = os.path.join(t.dir, "data")
    with fx.Semad("--auth", t.path, durability="strict", data=data) as s:
        assert req(s, "PUT", "/v1/semaphores/d", t.admin, {"capacity": 2})[0] == 201
        st, lease = s.json("POST", "/v1/semaphores/d/acquire",
                           {"timeout_ms": 0, "ttl_ms": 60000}, bearer(t.acquire))
        assert st == 200
    other = new_token(t.path, "late", "acquire")
    with fx.Semad("--auth", t.path, durability="strict", data=data) as s:
        assert req(s, "DELETE", "/v1/leases/" + lease["lease"], other)[0] == 403
        assert req(s, "DELETE", "/v1/leases/" + lease["lease"], t.acquire)[0] == 204


def wait_log(s, text):
    return fx.wait_until(lambda: any(text in line for line in s.log()), 10, repr(text))


def park(s, tok, body=None):
    """A blocking acquire of h on its own connection: (socket, its reader)."""
    sock = socket.create_connection((s.host, s.port), timeout=30 * fx.SLOW)
    sock.sendall(fx.raw_request("POST", "/v1/semaphores/h/acquire",
                                json.dumps(body or {"ttl_ms": 60000}), bearer(tok)))
    return sock, sock.makefile("rb")


def events(s, tok):
    """An event stream of h, its head read: (socket, its reader)."""
    sock = socket.create_connection((s.host, s.port), timeout=30 * fx.SLOW)
    sock.sendall(("GET /v1/semaphores/h/events HTTP/1.1\r\nHost: t\r\n"
                  "Authorization: Bearer %s\r\n\r\n" % tok).encode())
    f = sock.makefile("rb")
    assert b" 200 " in f.readline()
    while f.readline() not in (b"\r\n", b""):
        pass
    return sock, f


def closed(f):
    """Read until the server closes the connection (bounded by the socket's timeout)."""
    try:
        while f.readline():
            pass
        return True
    except OSError:
        return False


def test_sighup_reloads_without_dropping_connections():
    t = Tokens()
    with fx.Semad("--auth", t.path) as s:
        assert req(s, "PUT", "/v1/semaphores/h", t.admin, {"capacity": 1})[0] == 201
        keep = s.conn()  # a keep-alive connection that lives through every reload
        assert fx.do_request(keep, "GET", "/v1/semaphores/h", None, bearer(t.read))[0] == 200
        gone = s.conn()  # one whose token the reload removes: its next request is refused
        for _ in range(2):  # the second time from the connection's remembered token
            assert fx.do_request(gone, "GET", "/v1/semaphores/h", None, bearer(t.both))[0] == 200
        st, first = s.json("POST", "/v1/semaphores/h/acquire", {"timeout_ms": 0},
                           bearer(t.admin))
        assert st == 200
        # parked requests and event streams of a token that stays and of one that goes
        parked_keep, parked_keep_f = park(s, t.acquire)
        parked_gone, parked_gone_f = park(s, t.both)
        fx.wait_until(lambda: s.json("GET", "/v1/semaphores/h", None,
                                     bearer(t.read))[1]["waiting"] == 2, 10, "parked")
        stream_keep, stream_keep_f = events(s, t.read)
        stream_gone, stream_gone_f = events(s, t.both)

        late = new_token(t.path, "late", "read")
        with open(t.path) as f:
            lines = [ln for ln in f if not ln.startswith("ci ")]
        with open(t.path, "w") as f:
            f.writelines(lines)
        s.proc.send_signal(signal.SIGHUP)
        wait_log(s, "SIGHUP: 4 tokens loaded")
        wait_log(s, "SIGHUP: closed 2 event streams and parked requests")
        assert closed(parked_gone_f) and closed(stream_gone_f)
        assert req(s, "GET", "/v1/semaphores/h", late)[0] == 200
        assert req(s, "GET", "/v1/semaphores/h", t.both)[0] == 401
        assert fx.do_request(keep, "GET", "/v1/semaphores/h", None, bearer(t.read))[0] == 200
        assert fx.do_request(gone, "GET", "/v1/semaphores/h", None, bearer(t.both))[0] == 401
        gone.close()
        # the parked request of the token that stayed is granted, as its token's lease
        assert req(s, "DELETE", "/v1/leases/" + first["lease"], t.admin)[0] == 204
        st, _, data = fx.read_response(parked_keep_f)
        assert st == 200, data
        lid = json.loads(data)["lease"]
        assert req(s, "DELETE", "/v1/leases/" + lid, late)[0] == 403  # read only
        assert req(s, "DELETE", "/v1/leases/" + lid, t.acquire)[0] == 204
        seen = b""
        while b"event: released" not in seen:  # the stream that stayed saw it all
            seen += stream_keep_f.readline()
        for sock in (parked_keep, parked_gone, stream_keep, stream_gone):
            sock.close()
        # a bad file: the tokens in use stay, and the log says why with the line
        with open(t.path, "a") as f:
            f.write("broken sha256:1234 read\n")
        s.proc.send_signal(signal.SIGHUP)
        wait_log(s, "SIGHUP: keeping the 4 tokens loaded before")
        assert any("line 6:" in ln and "hash" in ln for ln in s.log()), s.log()[-3:]
        assert req(s, "GET", "/v1/semaphores/h", late)[0] == 200
        assert fx.do_request(keep, "GET", "/v1/semaphores/h", None, bearer(t.read))[0] == 200
        keep.close()


H = "sha256:" + "ab" * 32
BAD_FILES = [
    ("a 7 b\n", "line 1:", "hash"),
    ("ok %s read\nbad\n" % H, "line 2:", "no hash"),
    ("# c\n\nx %s\n" % H, "line 3:", "no rights"),
    ("x %s write\n" % H, "line 1:", "rights"),
    ("x %s read,read\n" % H, "line 1:", "rights"),
    ("x/y %s read\n" % H, "line 1:", "token name"),
    ("x %s read\ny %s admin\n" % (H, H), "line 2:", "the same hash as token 'x' on line 1"),
    ("x %s read\nx %s admin\n" % (H, "sha256:" + "cd" * 32), "line 2:",
     "'x' is already used on line 1"),
    ("x %s read\r\n" % H, "line 1:", "carriage return"),
    ("x %s read\n" % H.upper().replace("SHA256", "sha256"), "line 1:", "lower-case hex"),
    ("x %s read %s\n" % (H, " ".join("p%d" % i for i in range(17))), "line 1:",
     "more than 16 prefixes"),
    ("x %s read a\x01b\n" % H, "line 1:", "control byte"),
]


def test_a_token_file_others_can_write_is_named_in_the_log():
    t = Tokens()
    os.chmod(t.path, 0o666)
    with fx.Semad("--auth", t.path) as s:
        wait_log(s, "can be written by other users")
        assert req(s, "GET", "/v1/semaphores", t.read)[0] == 200


def test_bad_token_files_are_refused_with_their_line():
    d = fx.temp_dir(prefix="sema-auth-")
    for i, (text, where, what) in enumerate(BAD_FILES):
        path = os.path.join(d, "t%d" % i)
        with open(path, "w", newline="") as f:
            f.write(text)
        p = subprocess.run([fx.semad_path(), "--listen", "127.0.0.1:0", "--durability", "none",
                            "--auth", path], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, (text, p.returncode, p.stderr)
        assert path in p.stderr and where in p.stderr and what in p.stderr, (text, p.stderr)
    p = subprocess.run([fx.semad_path(), "--listen", "127.0.0.1:0", "--durability", "none",
                        "--auth", os.path.join(d, "missing")], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode != 0 and "No such file" in p.stderr, p.stderr


def listen_result(spec, *args):
    """(exit status or None if it started, what it wrote) for semad on `spec`."""
    p = subprocess.Popen([fx.semad_path(), "--durability", "none", "--listen", spec] + list(args),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in p.stderr:
            lines.append(line)
            if "listening on" in line:
                return None, "".join(lines)
        return p.wait(30), "".join(lines)
    finally:
        p.kill()
        p.wait(30)


def test_protected_mode():
    t = Tokens()
    for spec in ("0.0.0.0:0", ":0", "[::]:0"):
        rc, out = listen_result(spec)
        assert rc == 2, (spec, rc, out)
        assert "refusing to listen on" in out and "--auth" in out and "--insecure" in out, out
        assert listen_result(spec, "--insecure")[0] is None, spec
        assert listen_result(spec, "--auth", t.path)[0] is None, spec
    for spec in ("127.0.0.1:0", "127.0.0.2:0", "localhost:0", "[::1]:0"):
        rc, out = listen_result(spec)
        assert rc is None or "address" in out, (spec, rc, out)  # ::1 may be absent here
    env = dict(os.environ, SEMA_INSECURE="1")
    p = subprocess.Popen([fx.semad_path(), "--durability", "none", "--listen", "0.0.0.0:0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert "listening on" in p.stderr.readline() + p.stderr.readline()
    finally:
        p.kill()
        p.wait(30)


def sema(*args, token=None, server):
    env = dict(os.environ, SEMA_SERVER=server)
    env.pop("SEMA_TOKEN", None)
    if token is not None:
        env["SEMA_TOKEN"] = token
    p = subprocess.run([SEMA] + list(args), capture_output=True, text=True, timeout=60, env=env)
    return p.returncode, p.stdout, p.stderr


@fx.not_through_proxy("the sema command talks to semad itself")
def test_sema_and_the_c_client_send_sema_token():
    t = Tokens()
    with fx.Semad("--auth", t.path) as s:
        url = "http://127.0.0.1:%d" % s.semad_port
        rc, out, err = sema("create", "cli", "2", server=url)
        assert rc != 0 and "401" in out + err or "token" in (out + err).lower(), (rc, out, err)
        rc, out, err = sema("create", "cli", "2", token=t.acquire, server=url)
        assert rc != 0 and "admin" in out + err, (rc, out, err)
        assert sema("create", "cli", "2", token=t.admin, server=url)[0] == 0
        rc, out, err = sema("run", "cli", "--", "true", token=t.acquire, server=url)
        assert rc == 0, (out, err)
        rc, out, err = sema("acquire", "cli", "--json", token=t.acquire, server=url)
        assert rc == 0, err
        lid = json.loads(out)["lease"]
        rc, out, err = sema("release", lid, token=t.both, server=url)
        assert rc != 0 and "another token" in out + err, (rc, out, err)
        assert sema("release", lid, token=t.acquire, server=url)[0] == 0
        assert sema("ls", token=t.read, server=url)[0] == 0


@fx.not_through_proxy("the sema command talks to semad itself")
def test_a_worker_needs_only_the_acquire_right():
    # what security.md promises: a worker that takes and releases needs `acquire` alone.
    # Every verb of such work, with an acquire token, sends no request that needs more (no
    # GET of the lease before a renewal, no PUT before the acquire of `run -c`).
    t = Tokens()
    with fx.Semad("--auth", t.path, "--log-requests") as s:
        url = "http://127.0.0.1:%d" % s.semad_port
        assert sema("create", "jobs", "2", token=t.admin, server=url)[0] == 0

        def ok(*args):
            rc, out, err = sema(*args, token=t.acquire, server=url)
            assert rc == 0, (args, rc, out, err)
            return out.strip()
        ok("run", "jobs", "--", "true")
        ok("run", "jobs", "-c", "2", "--", "true")  # exists: -c creates only what is missing
        lease = ok("acquire", "jobs", "--ttl", "30s")
        ok("renew", lease)
        ok("renew", lease, "--ttl", "1m")
        ok("release", lease)
        ok("lock", "jobs-lock", "--exclusive", "--", "true")
        ok("wait-idle", "jobs", "-t", "5s")
        ticket = ok("ticket", "jobs")
        ok("release", ok("ticket-wait", ticket, "-t", "5s"))
        ok("ticket-leave", ok("ticket", "jobs"))
        ok("down", "jobs")
        ok("up", "jobs")
        forbidden = [line for line in s.log() if " -> 403" in line]
        assert forbidden == [], forbidden
        # what does need more says which right
        rc, out, err = sema("run", "new-one", "-c", "2", "--", "true", token=t.acquire,
                            server=url)
        assert rc == 1 and "'admin' right" in err, (rc, err)


@fx.not_through_proxy("the sema command talks to semad itself")
def test_sema_ls_with_a_token_limited_to_prefixes():
    # a whole list is refused to such a token: sema ls says to list under a prefix
    t = Tokens()
    jobs = new_token(t.path, "jobs", "read", "jobs/")
    with fx.Semad("--auth", t.path) as s:
        url = "http://127.0.0.1:%d" % s.semad_port
        assert sema("create", "jobs/a", "2", token=t.admin, server=url)[0] == 0
        assert sema("create", "other", "2", token=t.admin, server=url)[0] == 0
        for args in (["ls"], ["ls", "job"]):
            rc, out, err = sema(*args, token=jobs, server=url)
            assert rc == 1 and out == "", (args, rc, out, err)
            assert "'jobs/'" in err and "sema ls PREFIX" in err, (args, err)
        rc, out, err = sema("ls", "jobs/", token=jobs, server=url)
        assert rc == 0 and "jobs/a" in out and "other" not in out, (rc, out, err)
        rc, out, err = sema("ls", token=t.acquire, server=url)  # a right missing: no such hint
        assert rc == 1 and "'read' right" in err and "PREFIX" not in err, (rc, err)


@fx.not_through_proxy("the sema command talks to semad itself")
def test_sema_says_how_to_give_it_a_token():
    t = Tokens()
    with fx.Semad("--auth", t.path) as s:
        url = "http://127.0.0.1:%d" % s.semad_port
        rc, _, err = sema("ls", server=url)
        assert rc == 1 and "set SEMA_TOKEN" in err, (rc, err)
        rc, _, err = sema("ls", token="sema_" + "x" * 43, server=url)
        assert rc == 1 and "does not know the token in SEMA_TOKEN" in err, (rc, err)
    # `sema token new`'s usage errors point at its help once
    for args in (["token", "new"], ["token"], ["token", "new", "x", "--rigths", "read"]):
        p = subprocess.run([SEMA] + args, capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and p.stderr.count("--help") == 1, (args, p.stderr)
    p = subprocess.run([SEMA, "token", "new", "x", "--rigths", "read"], capture_output=True,
                       text=True, timeout=30)
    assert "did you mean --rights?" in p.stderr, p.stderr


if __name__ == "__main__":
    fx.main(globals())
