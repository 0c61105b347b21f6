# SPDX-License-Identifier: MIT
"""test_ui.py - semad's dashboard (/ui) and its guard against other sites, over HTTP against
the real server: the files as built into semad, each with its Content-Security-Policy,
nosniff, ETag (304) and HEAD; no inline script, style or markup written by a script; the
page holds no data (a name is only ever data); /ui/config.json (--ui-read-only, --auth and
the token's rights); --no-ui; a browser's request that changes state refused from another
site (Sec-Fetch-Site, else Origin against Host), any from a browser under --ui-read-only,
and without --auth a browser at another name than loopback (DNS rebinding). The page itself
runs in a real browser in tests/dashboard (dashboard.browser)."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402
from test_auth import Tokens  # noqa: E402

UI = os.path.join(fx.source_dir(), "src", "http", "ui")
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
XSS = "<img src=x onerror=alert(1)>"
XSS_PATH = "%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"


def csp(hd):
    """The Content-Security-Policy as {directive: [values]}."""
    out = {}
    for part in hd["content-security-policy"].split(";"):
        words = part.split()
        if words:
            out[words[0]] = words[1:]
    return out


def check_ui_headers(hd):
    pol = csp(hd)
    assert pol["default-src"] == ["'none'"], pol
    for d in ("script-src", "style-src", "img-src", "connect-src"):
        assert pol[d] == ["'self'"], (d, pol)  # nothing inline, nothing from elsewhere
    assert pol["frame-ancestors"] == ["'none'"] and pol["base-uri"] == ["'none'"], pol
    assert pol["form-action"] == ["'none'"], pol
    assert hd["x-content-type-options"] == "nosniff", hd
    assert hd["x-frame-options"] == "DENY", hd
    assert hd["referrer-policy"] == "no-referrer", hd


def test_every_file_as_built_with_its_headers():
    files = sorted(os.listdir(UI))
    assert "index.html" in files and "app.js" in files, files
    with fx.Semad() as s:
        for name in files:
            path = "/ui" if name == "index.html" else "/ui/" + name
            st, hd, body = s.request("GET", path)
            assert st == 200, (path, st)
            with open(os.path.join(UI, name), "rb") as f:
                assert body == f.read(), path + " is not the file as built"
            assert hd["content-type"] == TYPES[os.path.splitext(name)[1]], (path, hd)
            check_ui_headers(hd)
            assert hd["cache-control"] == "no-cache" and re.fullmatch(r'"[0-9a-f]{16}"', hd["etag"]), hd
        st, hd, body = s.request("GET", "/ui/nope.js")
        assert st == 404 and body == b"Cannot GET /ui/nope.js", (st, body)
        # what a 404 names is escaped: the only markup semad writes from a request
        st, hd, body = s.request("GET", "/ui/<svg/onload=alert(1)>")
        assert st == 404 and body == b"Cannot GET /ui/&lt;svg/onload=alert(1)&gt;", body


def test_head_is_get_without_a_body_and_304_for_a_known_etag():
    with fx.Semad() as s:
        st, hd, body = s.request("GET", "/ui/app.js")
        st2, hd2, body2 = s.request("HEAD", "/ui/app.js")
        assert st2 == 200 and body2 == b"", (st2, body2)
        assert hd2["content-length"] == str(len(body)) and hd2["etag"] == hd["etag"], hd2
        check_ui_headers(hd2)
        for inm in (hd["etag"], "W/" + hd["etag"], '"x", ' + hd["etag"], "*"):
            st, h304, b304 = s.request("GET", "/ui/app.js", headers={"If-None-Match": inm})
            assert st == 304 and b304 == b"" and h304["etag"] == hd["etag"], (inm, st, h304)
            assert "content-length" not in h304, h304
        st, _, body3 = s.request("GET", "/ui/app.js", headers={"If-None-Match": '"0000"'})
        assert st == 200 and body3 == body
        st, hd, _ = s.request("HEAD", "/ui")
        assert st == 200 and hd["content-type"] == "text/html; charset=utf-8", hd


def test_the_page_holds_no_data_and_writes_no_markup():
    """A name is data, never markup: the HTML has nothing of semad's state (it is the same
    before and after a semaphore named like an element exists), and the scripts only ever set
    text (no innerHTML, outerHTML, insertAdjacentHTML, document.write or eval; no inline
    script, style or event handler in the HTML)."""
    with fx.Semad() as s:
        before = s.request("GET", "/ui")[2]
        assert s.json("PUT", "/v1/semaphores/" + XSS_PATH, {"capacity": 1})[0] == 201
        st, page = s.json("GET", "/v1/semaphores")
        assert [x["name"] for x in page["semaphores"]] == [XSS]  # JSON: a string
        assert s.request("GET", "/ui")[2] == before
    html = open(os.path.join(UI, "index.html")).read()
    assert not re.search(r"<script(?![^>]*\ssrc=)", html), "an inline script"
    assert not re.search(r"<style|\sstyle=|\son[a-z]+=", html, re.I), "inline style or handler"
    for name in os.listdir(UI):
        if name.endswith(".js"):
            src = open(os.path.join(UI, name)).read()
            bad = re.findall(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|"
                             r"new Function|setAttribute\(\s*[\"']style", src)
            assert not bad, (name, bad)


def test_config_says_read_only_auth_and_the_tokens_rights():
    with fx.Semad() as s:
        st, c = s.json("GET", "/ui/config.json")
        assert st == 200 and c["read_only"] is False and c["auth"] is False, c
        assert c["token"] is None and c["sse_heartbeat_ms"] == 15000 and c["now"] > 0, c
    t = Tokens()
    with fx.Semad("--auth", t.path, "--ui-read-only", "--sse-heartbeat", "2s") as s:
        st, hd, body = s.request("GET", "/ui/config.json")
        assert st == 200 and hd["cache-control"] == "no-store", hd
        c = json.loads(body)
        assert c["read_only"] is True and c["auth"] is True and c["token"] is None, c
        assert c["sse_heartbeat_ms"] == 2000, c
        for tok, name, rights in ((t.admin, "ops", ["read", "acquire", "admin"]),
                                  (t.read, "viewer", ["read"]), (t.both, "ci", ["read", "acquire"])):
            st, c = s.json("GET", "/ui/config.json", headers={"Authorization": "Bearer " + tok})
            assert c["token"] == {"name": name, "rights": rights, "prefixes": []}, c
        st, c = s.json("GET", "/ui/config.json", headers={"Authorization": "Bearer sema_nope"})
        assert st == 200 and c["token"] is None, c
        # the page and its files need no token: they hold no data
        assert s.request("GET", "/ui")[0] == 200 and s.request("GET", "/ui/app.js")[0] == 200
        assert s.request("GET", "/v1/semaphores")[0] == 401


def test_no_ui_answers_404_and_the_api_is_unchanged():
    with fx.Semad("--no-ui") as s:
        for path in ("/ui", "/ui/app.js", "/ui/config.json", "/ui/index.html"):
            st, hd, body = s.request("GET", path)
            assert st == 404 and body == ("Cannot GET " + path).encode(), (path, st, body)
            assert s.request("HEAD", path)[0] == 404
        assert s.json("PUT", "/v1/semaphores/a", {"capacity": 1})[0] == 201
        assert s.request("GET", "/v1/semaphores/a")[0] == 200


def test_cross_site_changes_are_refused_and_change_nothing():
    """Sec-Fetch-Site is the browser's own word on who asks (a page cannot set it): only
    semad's own pages (same-origin, or none: the user's own navigation) may change state.
    Without it, Origin must be the address the request was sent to. A request with neither
    is not a browser's (curl, the clients) and is served as ever."""
    with fx.Semad() as s:
        host = "127.0.0.1:%d" % s.port
        assert s.json("PUT", "/v1/semaphores/a", {"capacity": 1})[0] == 201
        refused = [
            ("POST", "/v1/semaphores/a/acquire", {}, {"Sec-Fetch-Site": "cross-site"}),
            ("POST", "/v1/semaphores/a/acquire", {}, {"Sec-Fetch-Site": "same-site"}),
            ("POST", "/v1/semaphores/a/acquire", {}, {"Sec-Fetch-Site": "cross-site",
                                                      "Origin": "http://" + host}),
            ("POST", "/v1/semaphores/a/acquire", {}, {"Origin": "http://evil.example"}),
            ("POST", "/v1/semaphores/a/acquire", {}, {"Origin": "null"}),
            ("POST", "/v1/semaphores/a/acquire", {}, {"Origin": "https://" + host}),
            ("DELETE", "/v1/semaphores/a", None, {"Sec-Fetch-Site": "cross-site"}),
            ("PATCH", "/v1/semaphores/a", {"capacity": 5}, {"Origin": "http://evil.example"}),
            ("PUT", "/v1/semaphores/b", {"capacity": 1}, {"Sec-Fetch-Site": "cross-site"}),
            ("POST", "/semaphore", {"name": "c", "value": 1}, {"Sec-Fetch-Site": "cross-site"}),
            ("POST", "/semaphore/down", {"name": "a"}, {"Sec-Fetch-Site": "cross-site"}),
        ]
        for method, path, body, headers in refused:
            st, hd, data = s.request(method, path, body, headers)
            p = json.loads(data)
            assert st == 403 and p["code"] == "forbidden", (method, path, headers, st, data)
            assert "cross-site" in p["detail"], p
        st, a = s.json("GET", "/v1/semaphores/a")
        assert a["capacity"] == 1 and a["held"] == 0 and a["available"] == 1, a
        assert s.request("GET", "/v1/semaphores/b")[0] == 404
        assert s.request("GET", "/semaphore/value/c")[0] == 404
        # reading is a GET: a page can send it but never read the answer (no CORS)
        assert s.request("GET", "/v1/semaphores/a", headers={"Sec-Fetch-Site": "cross-site"})[0] == 200
        # semad's own page, a browser without Sec-Fetch-Site from semad's own origin, a client
        for headers in ({"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"},
                        {"Origin": "http://" + host}, {}):
            st, lease = s.json("POST", "/v1/semaphores/a/acquire", {}, headers=headers)
            assert st == 200, (headers, lease)
            assert s.request("DELETE", "/v1/leases/" + lease["lease"], headers=headers)[0] == 204


def test_browsers_only_at_loopback_without_auth():
    """Without --auth, a page whose own name resolves to 127.0.0.1 (DNS rebinding) would be
    same-origin with semad: semad answers a browser only when it was reached at a loopback
    address or localhost. --auth (the page has no token) and --insecure lift it."""
    browser = {"Sec-Fetch-Site": "same-origin"}
    with fx.Semad() as s:
        port = s.port
        for host in ("127.0.0.1:%d" % port, "localhost:%d" % port, "127.9.9.9:%d" % port,
                     "LOCALHOST"):
            st = s.request("GET", "/v1/semaphores", headers=dict(browser, Host=host))[0]
            assert st == 200, host
        for host in ("evil.example:%d" % port, "localhost.evil.example", "10.0.0.1:%d" % port,
                     "[::2]:%d" % port):
            st, hd, data = s.request("GET", "/v1/semaphores", headers=dict(browser, Host=host))
            assert st == 403 and b"loopback" in data, (host, st, data)
            st = s.request("GET", "/ui", headers={"Origin": "http://" + host, "Host": host})[0]
            assert st == 403, host
        # not a browser: served whatever the name
        assert s.request("GET", "/v1/semaphores", headers={"Host": "evil.example"})[0] == 200
    t = Tokens()
    with fx.Semad("--auth", t.path) as s:
        st = s.request("GET", "/v1/semaphores", headers=dict(browser, Host="sema.example"))[0]
        assert st == 401
    with fx.Semad("--insecure") as s:
        st = s.request("GET", "/v1/semaphores", headers=dict(browser, Host="sema.example"))[0]
        assert st == 200


def test_ui_read_only_lets_no_browser_change_state():
    with fx.Semad("--ui-read-only") as s:
        assert s.json("PUT", "/v1/semaphores/a", {"capacity": 1})[0] == 201  # a client may
        for headers in ({"Sec-Fetch-Site": "same-origin"},
                        {"Origin": "http://127.0.0.1:%d" % s.port}):
            st, hd, data = s.request("POST", "/v1/semaphores/a/acquire", {}, headers)
            assert st == 403 and b"--ui-read-only" in data, (headers, st, data)
            assert s.request("GET", "/v1/semaphores/a", headers=headers)[0] == 200
        assert s.json("GET", "/v1/semaphores/a")[1]["held"] == 0


if __name__ == "__main__":
    fx.main(globals())
