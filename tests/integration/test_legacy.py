# SPDX-License-Identifier: MIT
"""test_legacy.py - seed 001's legacy API against the real semad: the data-driven cases in
tests/cases/legacy/<case>/ (request, setup, status, content_type, body or body_prefix), and
the legacy objects seen through the v1 API."""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402

CASES = os.path.join(os.environ.get("SEMA_SOURCE_DIR",
                                    os.path.join(os.path.dirname(__file__), "..", "..")),
                     "tests", "cases", "legacy")

# Cases the validating proxy cannot carry (SEMA_TEST_OPENAPI_PROXY): a request for no route
# of the API, which the proxy answers itself, or one the proxy changes on its way. These
# go to semad directly there.
NOT_THROUGH_PROXY = {
    "unknown_route": "no route",
    "unknown_route_html_escaped": "no route",
    "wrong_method": "no route",
    "name_2E_2E_delete": "the proxy's URL parser takes %2E%2E for a '..' segment",
    "name_2E_2E_value": "the proxy's URL parser takes %2E%2E for a '..' segment",
    "bad_invalid_utf8_in_body": "the proxy decodes a text body (bad UTF-8 becomes U+FFFD)",
    "bad_nul_in_body": "the proxy decodes a text body",
}


def read(path, binary=False):
    with open(path, "rb") as f:
        data = f.read()
    return data if binary else data.decode("utf-8")


def parse_request(raw):
    head, _, body = raw.partition(b"\n\n")
    lines = head.decode("utf-8").split("\n")
    method, path = lines[0].split(" ", 1)
    headers = dict(l.split(": ", 1) for l in lines[1:] if l)
    return method, path, headers, (body if body else None)


def run_setup(s, text):
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(" ", 2)
        st = s.request(parts[0], parts[1], parts[2] if len(parts) > 2 else None)[0]
        assert st < 500, "setup %r answered %d" % (line, st)


def run_case(s, name):
    d = os.path.join(CASES, name)
    if os.path.exists(os.path.join(d, "setup")):
        run_setup(s, read(os.path.join(d, "setup")))
    method, path, headers, body = parse_request(read(os.path.join(d, "request"), True))
    errs = []
    try:
        st, hd, data = s.request(method, path, body, headers,
                                 direct=name in NOT_THROUGH_PROXY)
    except AssertionError as e:  # a reply that breaks docs/openapi.yaml, behind the proxy
        return [str(e)]
    want = int(read(os.path.join(d, "status")).strip())
    if st != want:
        errs.append("status %d, want %d" % (st, want))
    ctype = read(os.path.join(d, "content_type")).strip()
    if hd.get("content-type") != ctype:
        errs.append("content-type %r, want %r" % (hd.get("content-type"), ctype))
    text = data.decode("utf-8", "replace")
    if os.path.exists(os.path.join(d, "body")):
        exp = read(os.path.join(d, "body")).rstrip("\n")
        if text != exp:
            errs.append("body %r, want %r" % (text, exp))
    else:
        exp = read(os.path.join(d, "body_prefix")).rstrip("\n")
        if not text.startswith(exp):
            errs.append("body %r, want it to start with %r" % (text, exp))
    return errs


def test_cases():
    names = sorted(os.listdir(CASES))
    assert len(names) >= 40, "legacy cases missing"
    failures = []
    for name in names:
        with fx.Semad() as s:
            errs = run_case(s, name)
        if errs:
            failures.append("%s: %s" % (name, "; ".join(errs)))
    assert not failures, "legacy cases failed:\n  " + "\n  ".join(failures)
    print("%d legacy cases passed" % len(names))


def test_legacy_object_is_a_v1_semaphore():
    with fx.Semad() as s:
        assert s.request("POST", "/semaphore", {"name": "L", "value": 2})[0] == 200
        st, sem = s.json("GET", "/v1/semaphores/L")
        assert st == 200, st
        assert sem["capacity"] == 2 and sem["available"] == 2, sem
        st, lease = s.json("POST", "/v1/semaphores/L/acquire", {"weight": 2, "timeout_ms": 0})
        assert st == 200, (st, lease)
        assert s.json("GET", "/semaphore/value/L") == (200, {"name": "L", "value": 0})
        assert s.request("POST", "/semaphore/down", {"name": "L"})[0] == 409
        assert s.request("DELETE", "/v1/leases/" + lease["lease"])[0] == 204
        assert s.json("GET", "/semaphore/value/L") == (200, {"name": "L", "value": 2})
        # up raises the value above the capacity; v1 sees it as available units.
        assert s.json("POST", "/semaphore/up", {"name": "L"}) == (200, {"name": "L", "value": 3})
        st, sem = s.json("GET", "/v1/semaphores/L")
        assert sem["available"] == 3, sem


def test_down_never_jumps_the_v1_queue():
    with fx.Semad() as s:
        assert s.request("POST", "/semaphore", {"name": "Q", "value": 1})[0] == 200
        st, lease = s.json("POST", "/v1/semaphores/Q/acquire", {"timeout_ms": 0})
        assert st == 200
        box = {}

        def waiter():
            box["r"] = s.json("POST", "/v1/semaphores/Q/acquire", {"timeout_ms": 10000})

        t = threading.Thread(target=waiter)
        t.start()
        fx.wait_until(lambda: s.json("GET", "/v1/semaphores/Q")[1]["waiting"] == 1,
                      what="the v1 waiter to park")
        assert s.request("POST", "/semaphore/up", {"name": "Q"})[0] == 200
        t.join(10)
        # up returned a unit, the parked v1 waiter was served first
        assert box["r"][0] == 200, box
        assert s.request("POST", "/semaphore/down", {"name": "Q"})[0] == 409


def test_delete_answers_parked_v1_waiters_410():
    with fx.Semad() as s:
        assert s.request("POST", "/semaphore", {"name": "D", "value": 1})[0] == 200
        assert s.request("POST", "/semaphore/down", {"name": "D"})[0] == 200
        box = {}

        def waiter():
            box["r"] = s.json("POST", "/v1/semaphores/D/acquire", {})

        t = threading.Thread(target=waiter)
        t.start()
        fx.wait_until(lambda: s.json("GET", "/v1/semaphores/D")[1]["waiting"] == 1,
                      what="the waiter to park")
        assert s.request("DELETE", "/semaphore/D")[0] == 200
        t.join(10)
        assert box["r"][0] == 410 and box["r"][1]["code"] == "deleted", box


def test_keepalive_many_requests_one_connection():
    with fx.Semad() as s:
        c = s.conn()
        assert fx.do_request(c, "POST", "/semaphore", {"name": "k", "value": 0})[0] == 200
        for i in range(200):
            st, _, body = fx.do_request(c, "POST", "/semaphore/up", {"name": "k"})
            assert st == 200
        st, _, body = fx.do_request(c, "GET", "/semaphore/value/k")
        assert body == b'{"name":"k","value":200}', body
        c.close()


if __name__ == "__main__":
    fx.main(globals())
