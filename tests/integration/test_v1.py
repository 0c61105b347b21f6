# SPDX-License-Identifier: MIT
"""test_v1.py - semad's v1 API against the real process: semaphores, acquire, leases,
keyed locks, events, health and metrics, request validation, and regression tests for
the network pitfalls 21-30 of ../shared/pitfalls.md."""
import json
import os
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402

PROBLEM = "application/problem+json"
JSONCT = "application/json; charset=utf-8"


def put(s, name, cap):
    st, body = s.json("PUT", "/v1/semaphores/" + name, {"capacity": cap})
    assert st in (200, 201), (st, body)
    return body


def acquire(s, name, **kw):
    headers = {}
    if "idem" in kw:
        headers["Idempotency-Key"] = kw.pop("idem")
    return s.json("POST", "/v1/semaphores/%s/acquire" % name, kw, headers)


def problem(s, method, path, body=None, headers=None, direct=False):
    st, hd, data = s.request(method, path, body, headers, direct=direct)
    assert hd.get("content-type") == PROBLEM, (st, hd, data)
    p = json.loads(data)
    assert p["status"] == st and p["type"] == "urn:sema:problem:" + p["code"], p
    return st, p["code"]


class Parked:
    """An acquire parked on its own connection (a thread); close() disconnects it."""

    def __init__(self, s, name, body, path=None):
        self.sock = s.raw(timeout=30)
        self.f = self.sock.makefile("rb")
        self.sock.sendall(fx.raw_request("POST", path or "/v1/semaphores/%s/acquire" % name,
                                         body))
        self.result = None
        self.done = threading.Event()
        self.t = threading.Thread(target=self._wait, daemon=True)
        self.t.start()

    def _wait(self):
        try:
            st, hd, data = fx.read_response(self.f)
            self.result = (st, json.loads(data) if data else None)
        except (OSError, EOFError, ValueError):
            self.result = ("closed", None)
        self.done.set()

    def wait(self, timeout=10):
        assert self.done.wait(timeout * fx.SLOW), "parked request never answered"
        return self.result

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def waiting(s, name):
    return s.json("GET", "/v1/semaphores/" + name)[1]["waiting"]


def test_semaphore_crud():
    with fx.Semad() as s:
        st, hd, data = s.request("PUT", "/v1/semaphores/a", {"capacity": 3})
        assert st == 201 and hd["content-type"] == JSONCT, (st, hd)
        sem = json.loads(data)
        for k in ("name", "capacity", "available", "held", "fence", "waiting", "holders",
                  "waiters"):
            assert k in sem, (k, sem)
        assert s.json("PUT", "/v1/semaphores/a", {"capacity": 3})[0] == 200
        assert problem(s, "PUT", "/v1/semaphores/a", {"capacity": 4}) == (409, "conflict")
        st, sem = s.json("PATCH", "/v1/semaphores/a", {"capacity": 5})
        assert st == 200 and sem["capacity"] == 5, sem
        assert s.json("GET", "/v1/semaphores/a")[1]["available"] == 5
        assert s.request("DELETE", "/v1/semaphores/a")[0] == 204
        assert problem(s, "GET", "/v1/semaphores/a") == (404, "not_found")
        assert problem(s, "DELETE", "/v1/semaphores/a") == (404, "not_found")
        assert problem(s, "PATCH", "/v1/semaphores/a", {"capacity": 1}) == (404, "not_found")


def test_list_pagination():
    with fx.Semad() as s:
        names = ["p/%02d" % i for i in range(7)] + ["q1", "q2"]
        for n in names:
            put(s, n.replace("/", "%2F"), 1)
        seen, cursor = [], None
        while True:
            q = "/v1/semaphores?prefix=p%2F&limit=3" + ("&cursor=" + cursor if cursor else "")
            st, page = s.json("GET", q)
            assert st == 200, page
            assert len(page["semaphores"]) <= 3
            seen += [x["name"] for x in page["semaphores"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            cursor = cursor.replace("/", "%2F")
        assert seen == sorted(n for n in names if n.startswith("p/")), seen
        st, page = s.json("GET", "/v1/semaphores")
        assert [x["name"] for x in page["semaphores"]] == sorted(names)
        for bad in ("0", "1001", "x", "-1"):
            assert problem(s, "GET", "/v1/semaphores?limit=" + bad)[0] == 400


def test_list_items_count_grants_tickets_and_the_oldest_waiter():
    """A list item says what an overview shows without reading each semaphore: leases
    granted on it (a counter), tickets waiting in its queue, and when its head came."""
    with fx.Semad() as s:
        put(s, "busy", 1)
        put(s, "idle", 2)
        before = int(time.time() * 1000)
        st, first = acquire(s, "busy", ttl_ms=60000)
        assert st == 200, first
        w = Parked(s, "busy", {"owner": "head"})
        fx.wait_until(lambda: s.json("GET", "/v1/semaphores/busy")[1]["waiting"] == 1, 10,
                      "the parked acquire at the head")
        st, t1 = s.json("POST", "/v1/semaphores/busy/tickets", {"owner": "t1"})
        assert st == 201 and t1["status"] == "waiting", t1
        st, t2 = s.json("POST", "/v1/semaphores/busy/tickets", {"owner": "t2"})
        assert st == 201, t2

        def busy_item():
            st, page = s.json("GET", "/v1/semaphores")
            assert st == 200, page
            items = {x["name"]: x for x in page["semaphores"]}
            assert items["idle"]["grants"] == 0 and items["idle"]["tickets"] == 0, items
            assert items["idle"]["waiting_since"] is None, items
            return items["busy"]
        item = busy_item()
        assert item["waiting"] == 3 and item["grants"] == 1 and item["tickets"] == 2, item
        st, view = s.json("GET", "/v1/semaphores/busy")
        assert item["waiting_since"] == view["waiters"][0]["since"], (item, view)
        assert before - 1000 <= item["waiting_since"] <= int(time.time() * 1000) + 1000, item
        # a release grants the parked head; then the tickets in turn
        assert s.request("DELETE", "/v1/leases/" + first["lease"])[0] == 204
        w.done.wait(10 * fx.SLOW)
        assert w.result[0] == 200, w.result
        item = busy_item()
        assert item["grants"] == 2 and item["tickets"] == 2 and item["waiting"] == 2, item
        assert s.request("DELETE", "/v1/leases/" + w.result[1]["lease"])[0] == 204
        item = busy_item()
        assert item["grants"] == 3 and item["tickets"] == 1 and item["waiting"] == 1, item
        w.close()


def test_request_validation():
    with fx.Semad() as s:
        put(s, "v", 2)
        bad = [
            ("PUT", "/v1/semaphores/n", None),
            ("PUT", "/v1/semaphores/n", "{"),
            ("PUT", "/v1/semaphores/n", "[]"),
            ("PUT", "/v1/semaphores/n", {}),
            ("PUT", "/v1/semaphores/n", {"capacity": "3"}),
            ("PUT", "/v1/semaphores/n", {"capacity": 1.5}),
            ("PUT", "/v1/semaphores/n", {"capacity": -1}),
            ("PUT", "/v1/semaphores/n", {"capacity": 2 ** 53 + 1}),
            ("PUT", "/v1/semaphores/n", '{"capacity":1e400}'),
            ("PUT", "/v1/semaphores/n", '{"capacity":1,"capacity":2}'),
            ("POST", "/v1/semaphores/v/acquire", {"weight": "1"}),
            ("POST", "/v1/semaphores/v/acquire", {"weight": -1}),
            ("POST", "/v1/semaphores/v/acquire", {"weight": 0}),
            ("POST", "/v1/semaphores/v/acquire", {"weight": 3}),
            ("POST", "/v1/semaphores/v/acquire", {"timeout_ms": -1}),
            ("POST", "/v1/semaphores/v/acquire", {"timeout_ms": "soon"}),
            ("POST", "/v1/semaphores/v/acquire", {"ttl_ms": 0}),
            ("POST", "/v1/semaphores/v/acquire", {"ttl_ms": 2 ** 60}),
            ("POST", "/v1/semaphores/v/acquire", {"owner": 5}),
            ("POST", "/v1/semaphores/v/acquire", {"owner": "x" * 300}),
            ("POST", "/v1/locks/k/acquire", {"mode": "both"}),
            ("GET", "/v1/semaphores/%FF", None),
            ("GET", "/v1/semaphores/a%00", None),
        ]
        for method, path, body in bad:
            st, code = problem(s, method, path, body)
            assert st == 400, (method, path, body, st, code)
            assert code == "invalid_request", (method, path, body, code)
        # nothing above changed state
        assert s.json("GET", "/v1/semaphores/n")[0] == 404
        st, sem = s.json("GET", "/v1/semaphores/v")
        assert sem["available"] == 2 and sem["held"] == 0 and sem["waiting"] == 0, sem
        # No route of the API: behind the validating proxy these go to semad directly (the
        # proxy answers a method or path its document lacks itself).
        assert problem(s, "POST", "/v1/semaphores/v", {}, direct=True) == \
            (405, "method_not_allowed")
        # a 405 says which methods the path has (RFC 9110: Allow)
        st, hd, data = s.request("GET", "/v1/semaphores/v/acquire?x=1", direct=True)
        assert st == 405 and hd["allow"] == "POST", (st, hd)
        st, hd, data = s.request("POST", "/v1/semaphores/v", direct=True)
        assert st == 405 and hd["allow"] == "PUT, PATCH, GET, HEAD, DELETE", (st, hd)
        assert json.loads(data)["title"] == "Method Not Allowed"
        # one title per code, whichever check refused the request
        titles = set()
        for body in ({"weight": 99}, {"timeout_ms": "x"}, "{bad json"):
            st, hd, data = s.request("POST", "/v1/semaphores/v/acquire", body)
            assert st == 400, (body, st, data)
            titles.add(json.loads(data)["title"])
        assert titles == {"Invalid request"}, titles
        assert problem(s, "GET", "/v1/nothing", direct=True) == (404, "not_found")
        assert problem(s, "POST", "/v1/semaphores/none/acquire", {}) == (404, "not_found")


def test_acquire_release_and_lease_states():
    with fx.Semad() as s:
        put(s, "r", 2)
        st, lease = acquire(s, "r", weight=2, owner="me", ttl_ms=30000)
        assert st == 200, lease
        for k in ("lease", "name", "weight", "fence", "ttl_ms", "expires_at"):
            assert k in lease, (k, lease)
        assert lease["weight"] == 2 and lease["owner"] == "me" and len(lease["lease"]) >= 24
        assert problem(s, "POST", "/v1/semaphores/r/acquire", {"timeout_ms": 0}) == \
            (409, "unavailable")
        assert problem(s, "POST", "/v1/semaphores/r/acquire", {"timeout_ms": 50}) == \
            (409, "timeout")
        lid = lease["lease"]
        st, got = s.json("GET", "/v1/leases/" + lid)
        assert st == 200 and got["lease"] == lid, got
        st, ren = s.json("POST", "/v1/leases/%s/renew" % lid, {"ttl_ms": 60000})
        assert st == 200 and ren["expires_at"] >= lease["expires_at"], ren
        assert s.request("DELETE", "/v1/leases/" + lid)[0] == 204
        assert problem(s, "DELETE", "/v1/leases/" + lid) == (410, "lease_released")
        assert problem(s, "POST", "/v1/leases/%s/renew" % lid, {}) == (410, "lease_released")
        assert problem(s, "GET", "/v1/leases/never-seen-lease-id-000000") == (404, "not_found")
        assert s.json("GET", "/v1/semaphores/r")[1]["available"] == 2


def test_parked_acquire_granted_on_release_fifo():
    with fx.Semad() as s:
        put(s, "f", 1)
        st, first = acquire(s, "f")
        parked = []
        for i in range(3):
            parked.append(Parked(s, "f", {"owner": "w%d" % i}))
            fx.wait_until(lambda: waiting(s, "f") == i + 1, what="waiter %d to park" % i)
        lease = first
        for i in range(3):
            assert s.request("DELETE", "/v1/leases/" + lease["lease"])[0] == 204
            st, lease = parked[i].wait()
            assert st == 200 and lease["owner"] == "w%d" % i, (i, st, lease)
            for later in parked[i + 1:]:
                assert not later.done.is_set(), "a later waiter was served first"
        for p in parked:
            p.close()


def test_wait_idle():
    with fx.Semad() as s:
        put(s, "w", 2)
        assert s.json("POST", "/v1/semaphores/w/wait-idle", {})[0] == 200
        st, lease = acquire(s, "w")
        w = Parked(s, "w", {"timeout_ms": 10000}, path="/v1/semaphores/w/wait-idle")
        fx.wait_until(lambda: waiting(s, "w") >= 1, what="wait-idle to park")
        assert not w.done.is_set()
        assert s.request("DELETE", "/v1/leases/" + lease["lease"])[0] == 204
        assert w.wait()[0] == 200
        w.close()
        acquire(s, "w")
        assert problem(s, "POST", "/v1/semaphores/w/wait-idle", {"timeout_ms": 30}) == \
            (409, "timeout")


def test_keyed_locks():
    with fx.Semad() as s:
        a = s.json("POST", "/v1/locks/doc%2F1/acquire", {"mode": "shared"})
        b = s.json("POST", "/v1/locks/doc%2F1/acquire", {"mode": "shared", "owner": "b"})
        assert a[0] == 200 and b[0] == 200, (a, b)
        assert a[1]["mode"] == "shared" and a[1]["key"] == "doc/1", a
        assert problem(s, "POST", "/v1/locks/doc%2F1/acquire",
                       {"mode": "exclusive", "timeout_ms": 0}) == (409, "unavailable")
        # "mode": null is an absent mode (exclusive), as null is for every field
        assert problem(s, "POST", "/v1/locks/doc%2F1/acquire",
                       {"mode": None, "timeout_ms": 0}) == (409, "unavailable")
        st, state = s.json("GET", "/v1/locks/doc%2F1")
        assert st == 200 and len(state["holders"]) == 2, state
        assert state["readers"] == 2 and state["max_readers"] == 1048576, state
        x = Parked(s, None, {"mode": "exclusive"}, path="/v1/locks/doc%2F1/acquire")
        fx.wait_until(lambda: len(s.json("GET", "/v1/locks/doc%2F1")[1]["waiters"]) == 1,
                      what="the writer to park")
        # writers are not starved: a new reader queues behind the writer
        assert problem(s, "POST", "/v1/locks/doc%2F1/acquire",
                       {"mode": "shared", "timeout_ms": 0}) == (409, "unavailable")
        for h in (a, b):
            assert s.request("DELETE", "/v1/leases/" + h[1]["lease"])[0] == 204
        st, xl = x.wait()
        assert st == 200 and xl["mode"] == "exclusive", xl
        assert s.request("DELETE", "/v1/leases/" + xl["lease"])[0] == 204
        x.close()
        assert problem(s, "GET", "/v1/locks/doc%2F1") == (404, "not_found")


def test_lock_list_by_key_while_held_or_awaited():
    with fx.Semad() as s:
        put(s, "doc%2Fsem", 1)
        st, r = s.json("POST", "/v1/locks/doc%2F1/acquire", {"mode": "shared"})
        assert st == 200, r
        st, x = s.json("POST", "/v1/locks/doc%2F0/acquire", {"mode": "exclusive"})
        assert st == 200, x
        st, page = s.json("GET", "/v1/locks?prefix=doc%2F")
        assert st == 200 and page["next_cursor"] is None, page
        assert page["locks"] == [
            {"key": "doc/0", "readers": 0, "exclusive": True, "waiting": 0, "waiting_since": None},
            {"key": "doc/1", "readers": 1, "exclusive": False, "waiting": 0,
             "waiting_since": None}], page
        st, page = s.json("GET", "/v1/locks?limit=1")
        assert [x["key"] for x in page["locks"]] == ["doc/0"] and page["next_cursor"] == "doc/0"
        st, page = s.json("GET", "/v1/locks?limit=1&cursor=doc%2F0")
        assert [x["key"] for x in page["locks"]] == ["doc/1"], page
        for lease in (r, x):
            assert s.request("DELETE", "/v1/leases/" + lease["lease"])[0] == 204
        assert s.json("GET", "/v1/locks")[1] == {"locks": [], "next_cursor": None}
        assert problem(s, "GET", "/v1/locks?limit=0")[0] == 400


def test_lock_modes_stay_as_requested_with_one_reader():
    """With --lock-readers 1 both modes weigh 1: the lease, the lock's view, the idempotency
    check and a restart still tell an exclusive holder from a shared one."""
    # On Redis (SEMA_TEST_REDIS) the state is in Redis: no data directory, no restart.
    data = None if fx.REDIS else os.path.join(fx.tempfile.mkdtemp(prefix="semad-locks-"), "data")
    try:
        with fx.Semad("--lock-readers", "1", durability="strict", data=data) as s:
            st, x = s.json("POST", "/v1/locks/k/acquire", {"mode": "exclusive"},
                           {"Idempotency-Key": "i1"})
            assert st == 200 and x["mode"] == "exclusive" and x["weight"] == 1, x
            r = Parked(s, None, {"mode": "shared"}, path="/v1/locks/k/acquire")
            fx.wait_until(lambda: len(s.json("GET", "/v1/locks/k")[1]["waiters"]) == 1,
                          what="the reader to park")
            st, view = s.json("GET", "/v1/locks/k")
            assert st == 200 and view["readers"] == 0 and view["max_readers"] == 1, view
            assert [h["mode"] for h in view["holders"]] == ["exclusive"], view
            assert [w["mode"] for w in view["waiters"]] == ["shared"], view
            # the same key for the other mode is another request, even at the same weight
            assert problem(s, "POST", "/v1/locks/k/acquire", {"mode": "shared"},
                           {"Idempotency-Key": "i1"}) == (409, "idempotency_key_mismatch")
            assert s.request("DELETE", "/v1/leases/" + x["lease"])[0] == 204
            st, rl = r.wait()
            assert st == 200 and rl["mode"] == "shared", rl
            st, view = s.json("GET", "/v1/locks/k")
            assert view["readers"] == 1 and view["holders"][0]["mode"] == "shared", view
            r.close()
            st, x2 = s.json("POST", "/v1/locks/k2/acquire", {"mode": "exclusive"})
            assert st == 200, x2
        if data is None:
            return
        with fx.Semad("--lock-readers", "1", durability="strict", data=data) as s:
            for key, mode, readers in (("k", "shared", 1), ("k2", "exclusive", 0)):
                st, view = s.json("GET", "/v1/locks/" + key)
                assert st == 200 and view["readers"] == readers, view
                assert [h["mode"] for h in view["holders"]] == [mode], view
    finally:
        if data is not None:
            fx.shutil.rmtree(os.path.dirname(data), ignore_errors=True)


def fleet_others(fl, inst):
    """The instances of fleet `fl` other than `inst`."""
    return [x for x in fl.live() if x is not inst]


def read_event(f):
    ev = {}
    while True:
        line = f.readline()
        if not line:
            return None
        line = line.decode().rstrip("\n")
        if line == "":
            if ev:
                return ev
            continue
        if line.startswith(":"):
            continue
        k, _, v = line.partition(": ")
        ev[k] = v


@fx.not_through_proxy("an event stream (prism reads a reply whole before it checks it)")
def test_events_stream():
    with fx.Semad() as s:
        put(s, "e", 1)
        sock = s.raw()
        f = sock.makefile("rb")
        sock.sendall(b"GET /v1/semaphores/e/events HTTP/1.1\r\nHost: t\r\n\r\n")
        assert f.readline().startswith(b"HTTP/1.1 200")
        heads = {}
        while True:
            line = f.readline()
            if line == b"\r\n":
                break
            k, v = line.decode().split(":", 1)
            heads[k.lower()] = v.strip()
        assert heads["content-type"] == "text/event-stream", heads
        st, lease = acquire(s, "e", owner="<b>w-1</b>")
        ev = read_event(f)
        assert ev["event"] == "granted", ev
        data = json.loads(ev["data"])
        # the lease as the holder's view shows it (a page can show its holder at once)
        assert {k: data[k] for k in ("lease", "weight", "fence", "owner", "acquired_at",
                                     "expires_at")} == {
            k: lease[k] for k in ("lease", "weight", "fence", "owner", "acquired_at",
                                  "expires_at")}, (data, lease)
        s.request("DELETE", "/v1/leases/" + lease["lease"])
        ev = read_event(f)
        assert ev["event"] == "released" and json.loads(ev["data"])["acquired_at"] == \
            lease["acquired_at"], ev
        s.request("DELETE", "/v1/semaphores/e")
        assert read_event(f)["event"] == "deleted"
        assert read_event(f) is None  # the stream ends after "deleted"
        sock.close()
        assert problem(s, "GET", "/v1/semaphores/none/events") == (404, "not_found")


def open_events(s, name, last_id=None):
    """GET the event stream of `name` (with Last-Event-ID if given): (socket, file)."""
    sock = s.raw()
    f = sock.makefile("rb")
    extra = "Last-Event-ID: %s\r\n" % last_id if last_id is not None else ""
    sock.sendall(("GET /v1/semaphores/%s/events HTTP/1.1\r\nHost: t\r\n%s\r\n"
                  % (name, extra)).encode())
    assert f.readline().startswith(b"HTTP/1.1 200")
    while f.readline() != b"\r\n":
        pass
    return sock, f


@fx.not_through_proxy("event streams")
def test_events_resume_with_last_event_id():
    with fx.Semad() as s:
        # On a fleet (SEMA_TEST_REDIS) the streams below are read from one instance while the
        # changes go round robin through all of them; at the end every other instance resumes
        # from an id the first one sent (ids are the log's, the same on every instance).
        w = fx.one_instance(s)
        put(s, "er", 1)
        sock, f = open_events(w, "er")
        st, a = acquire(s, "er")
        first = read_event(f)
        assert first["event"] == "granted" and first["id"], first
        f.close()  # the watcher drops (the socket closes with its last file)
        sock.close()  # what follows happens while it is away

        def gauges():
            return (metric(w, "semad_event_streams ", "") == 0,
                    metric(w, "semad_event_streams_kept ", "") == 1)
        fx.wait_until(lambda: gauges() == (True, True), 10, "the stream to be kept, unwatched")
        s.request("DELETE", "/v1/leases/" + a["lease"])
        st, b = acquire(s, "er")
        sock, f = open_events(w, "er", first["id"])
        missed = [read_event(f), read_event(f)]
        assert [m["event"] for m in missed] == ["released", "granted"], missed
        assert json.loads(missed[0]["data"])["lease"] == a["lease"]
        assert json.loads(missed[1]["data"])["lease"] == b["lease"]
        ids = [first["id"]] + [m["id"] for m in missed]
        seqs = [int(i.split("-")[1]) for i in ids]
        assert seqs == sorted(seqs) and len(set(seqs)) == 3, ids
        s.request("DELETE", "/v1/leases/" + b["lease"])
        live = read_event(f)  # live events go on, none twice
        assert live["event"] == "released" and int(live["id"].split("-")[1]) > seqs[-1], live
        f.close()
        sock.close()
        # An id the server never sent (another run of semad, say): one "reset" at the
        # current point, then live events.
        for bad in ("garbage", "1-1", live["id"] + "7"):
            sock, f = open_events(w, "er", bad)
            ev = read_event(f)
            assert ev["event"] == "reset" and ev["id"] == live["id"], (bad, ev)
            assert json.loads(ev["data"])["name"] == "er" and json.loads(ev["data"])["reason"]
            f.close()
            sock.close()
        # The newest id: nothing to replay, the next event is live.
        sock, f = open_events(w, "er", live["id"])
        st, c = acquire(s, "er")
        ev = read_event(f)
        assert ev["event"] == "granted" and json.loads(ev["data"])["lease"] == c["lease"], ev
        f.close()
        sock.close()
        # Another instance resumes from that id too: nothing was missed, the next event is
        # live and numbered after it.
        held = c
        for other in (fleet_others(s, w) if hasattr(s, "live") else []):
            sock, f = open_events(other, "er", ev["id"])
            if held is not None:
                s.request("DELETE", "/v1/leases/" + held["lease"])
                held, want = None, "released"
            else:
                st, held = acquire(s, "er")
                want = "granted"
            nxt = read_event(f)
            assert nxt["event"] == want, (nxt, ev)
            uid, seq = ev["id"].split("-")
            assert nxt["id"] == "%s-%d" % (uid, int(seq) + 1), (nxt, ev)
            ev = nxt
            f.close()
            sock.close()
        # A watcher that missed the delete learns of it: the name answers 404.
        s.request("DELETE", "/v1/semaphores/er")
        assert problem(s, "GET", "/v1/semaphores/er/events") == (404, "not_found")


@fx.not_through_proxy("event streams, and repeated headers a proxy joins into one")
def test_events_last_event_id_header_limits():
    with fx.Semad() as s:
        put(s, "eh", 1)
        for headers, want in (("Last-Event-ID: 1-1\r\nLast-Event-ID: 1-2\r\n", b"one value"),
                              ("Last-Event-ID: %s\r\n" % ("9" * 300), b"longer than 255")):
            sock = s.raw()
            sock.sendall(("GET /v1/semaphores/eh/events HTTP/1.1\r\nHost: t\r\n%s\r\n"
                          % headers).encode())
            reply = b""
            while b"\r\n\r\n" not in reply or want not in reply:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
            sock.close()
            assert reply.startswith(b"HTTP/1.1 400") and want in reply, reply[:300]
        # an empty value is no resume: the stream opens and no reset comes first
        sock, f = open_events(s, "eh", "")
        st, a = acquire(s, "eh")
        assert read_event(f)["event"] == "granted"
        f.close()
        sock.close()


def healthz(s):
    """/healthz of one instance. On Redis its counts are those of the last answer Redis gave
    that instance (docs/redis.md), so it lists the semaphores first."""
    one = fx.one_instance(s)
    one.request("GET", "/v1/semaphores?limit=1")
    return one.json("GET", "/healthz")


def test_healthz_and_metrics():
    with fx.Semad() as s:
        put(s, "m", 1)
        acquire(s, "m")
        st, h = healthz(s)
        assert st == 200 and h["status"] == "ok", h
        if not fx.ON_CLUSTER:  # (there, each instance counts the slots it has used)
            assert h["semaphores"] == 1 and h["leases"] == 1, h
        st, hd, data = s.request("GET", "/metrics")
        assert st == 200 and hd["content-type"].startswith("text/plain"), hd
        text = fx.metrics_text(s)  # every instance's (counters are per instance)
        assert 'semad_http_requests_total{method="PUT",route="/v1/semaphores/{name}",' \
               'status="201"} 1' in text, text
        assert "semad_http_connections " in text
        assert "semad_grants_total" in text


@fx.not_on_cluster("/metrics' series per semaphore (capacity, held, tenants, tokens)")
def test_tenant_series_in_metrics_are_bounded():
    """/metrics has each tenant's units held and waiting on a semaphore with tenants (the
    --metrics-max-tenants with the most units, by name; the others summed as "_other") and the
    tokens of a semaphore with a rate, on every back end."""
    with fx.Semad("--metrics-max-tenants", "2") as s:
        st, v = s.json("PUT", "/v1/semaphores/mt", {"capacity": 10, "tenant_max": 4})
        assert st == 201, (st, v)
        st, v = s.json("PUT", "/v1/semaphores/mr", {"capacity": 1, "rate_per_s": 5,
                                                      "rate_burst": 3})
        assert st == 201, (st, v)
        for tenant, w in (("acme", 3), ("bolt", 2), ("core", 1)):
            st, v = s.json("POST", "/v1/semaphores/mt/acquire",
                           {"weight": w, "tenant": tenant, "timeout_ms": 0})
            assert st == 200 and v["tenant"] == tenant, (st, v)
        text = fx.one_instance(s).request("GET", "/metrics")[2].decode()
        for line in ('semad_tenant_held{name="mt",tenant="acme"} 3',
                     'semad_tenant_held{name="mt",tenant="bolt"} 2',
                     'semad_tenant_held{name="mt",tenant="_other"} 1',
                     'semad_tenant_waiting{name="mt",tenant="acme"} 0'):
            assert line in text.split("\n"), (line, text)
        assert 'tenant="core"' not in text, text
        assert re.search(r'^semad_semaphore_tokens\{name="mr"\} [0-3]$', text, re.M), text


def test_metrics_show_the_process_memory_and_descriptors():
    """/metrics has the process's resident memory and descriptors, and the allocator's own
    count of its heap, each matching what the kernel and a fresh allocation say."""
    with fx.Semad() as s:
        one = fx.one_instance(s)
        text = one.request("GET", "/metrics")[2].decode()  # one snapshot
        m = {}
        for k in ("process_resident_memory_bytes", "process_open_fds", "semad_heap_in_use_bytes",
                  "semad_heap_free_bytes", "semad_heap_arena_bytes", "semad_heap_mmap_bytes"):
            found = re.search(r"^%s (\d+)$" % k, text, re.M)
            assert found, (k, text)
            m[k] = int(found.group(1))
        pid = one.proc.pid
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) * 1024
        assert abs(m["process_resident_memory_bytes"] - rss) < 4 << 20, (m, rss)
        fds = len(os.listdir("/proc/%d/fd" % pid))
        assert abs(m["process_open_fds"] - fds) <= 2, (m, fds)  # this request's own socket
        if os.environ.get("SEMA_SANITIZE"):
            return  # a sanitizer's allocator has no statistics of glibc's: the heap reads 0
        assert 0 < m["semad_heap_in_use_bytes"] < m["process_resident_memory_bytes"], m
        assert m["semad_heap_in_use_bytes"] + m["semad_heap_free_bytes"] == \
            m["semad_heap_arena_bytes"] + m["semad_heap_mmap_bytes"], m


def test_json_replies_end_with_a_newline():
    """v1 JSON and problem documents end with one newline (curl's output ends its line);
    the legacy API's JSON keeps the original's bytes, without it."""
    with fx.Semad() as s:
        for method, path, body in (("PUT", "/v1/semaphores/nl", {"capacity": 2}),
                                   ("GET", "/v1/semaphores/nl", None),
                                   ("POST", "/v1/semaphores/nl/acquire", {}),
                                   ("GET", "/v1/semaphores", None),
                                   ("GET", "/healthz", None),
                                   ("GET", "/v1/semaphores/none", None),
                                   ("POST", "/v1/semaphores/nl/acquire", {"weight": 9}),
                                   ("GET", "/v1/nope", None)):
            st, hd, data = s.request(method, path, body, direct=True)
            assert data.endswith(b"}\n") and not data.endswith(b"\n\n"), (path, st, data)
            json.loads(data)
        st, hd, data = s.request("POST", "/semaphore", {"name": "L", "value": 1}, direct=True)
        assert data == b'{"name":"L","value":1}', data
        st, hd, data = s.request("GET", "/semaphore/value/L", direct=True)
        assert data == b'{"name":"L","value":1}', data


def read_head(f):
    """Status and headers (lower-case) of one response, and nothing of its body."""
    status = int(f.readline().split()[1])
    headers = {}
    for line in iter(f.readline, b"\r\n"):
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    return status, headers


@fx.not_through_proxy("HEAD requests (docs/openapi.yaml lists GET; HEAD is implied)")
def test_head_answers_like_get_without_a_body():
    """RFC 9110 9.3.2: the GET reply's status and headers, Content-Length included, and no
    body; the next request on the connection is read right after it."""
    with fx.Semad() as s:
        put(s, "h", 2)
        assert s.request("POST", "/semaphore", {"name": "L", "value": 1})[0] == 200
        for path in ("/healthz", "/v1/semaphores/h", "/v1/semaphores?limit=5", "/metrics",
                     "/semaphore/value/L", "/v1/semaphores/nope", "/nope"):
            gst, ghd, gbody = s.request("GET", path)
            sock = s.raw()
            f = sock.makefile("rb")
            sock.sendall(b"HEAD %s HTTP/1.1\r\nHost: t\r\n\r\n"
                         b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n" % path.encode())
            st, hd = read_head(f)
            assert st == gst and hd["content-type"] == ghd["content-type"], (path, st, hd)
            if path == "/healthz" and b'"contact_age_ms"' in gbody:
                # on Redis the age of the last contact moves between the two requests: the
                # length is that of the same document with the age's digits as they were then
                assert abs(int(hd["content-length"]) - len(gbody)) < 8, (path, hd, gbody)
            elif path != "/metrics":  # the counters move between the two requests
                assert int(hd["content-length"]) == len(gbody), (path, hd, gbody)
            # the next bytes are the GET's reply: the HEAD reply had no body
            assert fx.read_response(f)[0] == 200, path
            sock.close()
        # The event stream answers GET only: HEAD gets 405 with Allow: GET, no body.
        sock = s.raw()
        f = sock.makefile("rb")
        sock.sendall(b"HEAD /v1/semaphores/h/events HTTP/1.1\r\nHost: t\r\n\r\n"
                     b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        st, hd = read_head(f)
        assert st == 405 and hd["allow"] == "GET", (st, hd)
        assert fx.read_response(f)[0] == 200
        sock.close()
        # Allow names HEAD wherever GET is (but for the event stream)
        st, hd, _ = s.request("POST", "/v1/semaphores/h", direct=True)
        assert hd["allow"] == "PUT, PATCH, GET, HEAD, DELETE", hd


# ---- pitfalls 21-30 (../shared/pitfalls.md) at the HTTP level ----

def test_pitfall21_crashed_holder_permit_comes_back_by_ttl():
    with fx.Semad() as s:
        put(s, "c", 1)
        st, lease = acquire(s, "c", ttl_ms=300)  # the holder "crashes": never releases
        assert st == 200
        st, second = acquire(s, "c", timeout_ms=10000)
        assert st == 200, second  # granted once the first lease expired
        assert problem(s, "POST", "/v1/leases/%s/renew" % lease["lease"], {}) == \
            (410, "lease_expired")


def test_pitfall22_23_parked_waiter_woken_without_polling():
    with fx.Semad() as s:
        put(s, "p", 1)
        st, lease = acquire(s, "p")
        p = Parked(s, "p", {})
        fx.wait_until(lambda: waiting(s, "p") == 1, what="park")
        reqs_before = metric(s, "semad_http_requests_total", 'route="/v1/semaphores/{name}/acquire"')
        s.request("DELETE", "/v1/leases/" + lease["lease"])
        assert p.wait()[0] == 200
        # exactly one acquire request was made by the parked client: no polling
        assert metric(s, "semad_http_requests_total",
                      'route="/v1/semaphores/{name}/acquire"') == reqs_before + 1
        p.close()


def metric(s, name, label):
    """The sum of the series `name` with `label` over every instance behind s."""
    total = 0
    for line in fx.metrics_text(s).splitlines():
        if line.startswith(name) and label in line:
            total += int(line.rsplit(" ", 1)[1])
    return total


def test_unknown_fields_are_refused_by_name_and_change_nothing():
    # Every v1 route with a body lists its fields; any other is a 400 naming it (with the
    # likely one for a typo), through both body parsers (flat, and jansson for escapes),
    # and nothing happens: a misspelt ttl is never the default ttl silently taken.
    with fx.Semad() as s:
        put(s, "u", 2)
        st, lease = acquire(s, "u", weight=2)
        st, ticket = s.json("POST", "/v1/semaphores/u/tickets", {})
        assert st == 201 and ticket["status"] == "waiting", (st, ticket)
        cases = [
            ("PUT", "/v1/semaphores/n", {"capacity": 1, "color": "red"}, "color", None),
            ("PATCH", "/v1/semaphores/u", {"capacity": 9, "capacty": 9}, "capacty", "capacity"),
            ("POST", "/v1/semaphores/u/acquire", {"ttl": 60000}, "ttl", "ttl_ms"),
            ("POST", "/v1/semaphores/u/acquire", {"weigth": 2}, "weigth", "weight"),
            ("POST", "/v1/semaphores/u/acquire", r'{"timeout_ms":0,"w\u00e9ight":1}',
             r"w\u00e9ight", "weight"),
            ("POST", "/v1/semaphores/u/wait-idle", {"timeout": 0}, "timeout", "timeout_ms"),
            ("POST", "/v1/semaphores/u/tickets", {"keepalive": 500}, "keepalive",
             "keepalive_ms"),
            ("POST", "/v1/leases/%s/renew" % lease["lease"], {"ttl": 5}, "ttl", "ttl_ms"),
            ("POST", "/v1/locks/k/acquire", {"mdoe": "shared"}, "mdoe", "mode"),
            ("POST", "/v1/locks/k/acquire", {"mode": "shared", "weight": 1}, "weight", None),
        ]
        # each route's fields, as docs/openapi.yaml lists them
        limits = {"capacity", "tenant_max", "rate_per_s", "rate_burst"}
        takes = {"locks/k/acquire": {"mode", "timeout_ms", "ttl_ms", "owner"},
                 "semaphores/n": limits, "semaphores/u": limits,
                 "acquire": {"weight", "timeout_ms", "ttl_ms", "owner", "tenant"},
                 "wait-idle": {"timeout_ms"},
                 "tickets": {"weight", "ttl_ms", "owner", "keepalive_ms", "tenant"},
                 "renew": {"ttl_ms"}}
        for method, path, body, field, hint in cases:
            st, hd, data = s.request(method, path, body)
            p = json.loads(data)
            assert st == 400 and p["code"] == "invalid_request", (method, path, st, p)
            shown = json.loads('"%s"' % field)
            assert p["detail"].startswith('unknown field "%s"' % shown), p["detail"]
            assert ("did you mean \"%s\"?" % hint in p["detail"]) if hint else \
                "did you mean" not in p["detail"], p["detail"]
            listed = set(p["detail"].split("; the fields are: ", 1)[1].split(", "))
            assert listed == next(v for k, v in takes.items() if path.endswith(k)), p["detail"]
        # every listed field is taken (a body with all of them is not refused for its fields)
        full = [("POST", "/v1/semaphores/u/acquire",
                 {"weight": 1, "timeout_ms": 0, "ttl_ms": 1000, "owner": "o", "tenant": "t"}, 409),
                ("POST", "/v1/semaphores/u/tickets",
                 {"weight": 1, "ttl_ms": 1000, "owner": "o", "keepalive_ms": 5000,
                  "tenant": "t"}, 201),
                ("POST", "/v1/semaphores/u/wait-idle", {"timeout_ms": 0}, 409)]
        for method, path, body, want in full:
            st, hd, data = s.request(method, path, body)
            assert st == want, (path, st, data)
        # a long key is cut in the message, at a character boundary
        st, hd, data = s.request("POST", "/v1/semaphores/u/acquire", {"\u00e9" * 100: 1})
        p = json.loads(data)
        assert st == 400 and ('"' + "\u00e9" * 32 + '..."') in p["detail"], p["detail"]
        # nothing above changed anything
        assert s.json("GET", "/v1/semaphores/n")[0] == 404
        st, sem = s.json("GET", "/v1/semaphores/u")
        # (the tickets in line: one before, and the one with every field)
        assert sem["capacity"] == 2 and sem["held"] == 2 and sem["waiting"] == 2, sem
        assert s.json("GET", "/v1/leases/" + lease["lease"])[1]["ttl_ms"] == lease["ttl_ms"]
        st, lock = s.json("POST", "/v1/locks/k/acquire", {"timeout_ms": 0})
        assert st == 200 and lock["mode"] == "exclusive", (st, lock)


def test_pitfall24_expiry_uses_the_server_clock():
    with fx.Semad() as s:
        put(s, "t", 2)
        st, lease = acquire(s, "t", ttl_ms=1234)
        assert lease["expires_at"] - lease["acquired_at"] == 1234, lease
        # a client-supplied clock is not part of the API: refused, nothing granted
        st, p = s.json("POST", "/v1/semaphores/t/acquire",
                       {"timeout_ms": 5000, "now": 0, "expires_at": 1})
        assert st == 400 and p["detail"].startswith('unknown field "now"'), (st, p)
        assert s.json("GET", "/v1/semaphores/t")[1]["held"] == 1


def test_pitfall25_fences_strictly_increase():
    with fx.Semad() as s:
        put(s, "fe", 2)
        fences = []
        for i in range(5):
            st, lease = acquire(s, "fe")
            fences.append(lease["fence"])
            if i == 2:
                assert s.request("POST", "/v1/leases/%s/revoke" % lease["lease"])[0] == 204
                assert problem(s, "GET", "/v1/leases/" + lease["lease"]) == \
                    (410, "lease_revoked")
            else:
                s.request("DELETE", "/v1/leases/" + lease["lease"])
        assert all(a < b for a, b in zip(fences, fences[1:])), fences
        assert s.json("GET", "/v1/semaphores/fe")[1]["fence"] >= fences[-1]


def test_pitfall26_renewing_a_lost_lease_fails_loudly():
    with fx.Semad() as s:
        put(s, "l", 1)
        st, lease = acquire(s, "l", ttl_ms=200)
        fx.wait_until(lambda: s.request("GET", "/v1/leases/" + lease["lease"])[0] == 410,
                      what="the lease to expire")
        assert problem(s, "POST", "/v1/leases/%s/renew" % lease["lease"], {"ttl_ms": 5000}) \
            == (410, "lease_expired")
        assert s.json("GET", "/v1/semaphores/l")[1]["held"] == 0


@fx.not_through_proxy("a client's disconnect (prism does not pass it on to semad)")
def test_pitfall27_dead_waiters_leave_the_queue():
    with fx.Semad() as s:
        put(s, "d", 1)
        st, lease = acquire(s, "d")
        dead = Parked(s, "d", {"weight": 1})
        fx.wait_until(lambda: waiting(s, "d") == 1, what="park")
        follower = Parked(s, "d", {"weight": 1})
        fx.wait_until(lambda: waiting(s, "d") == 2, what="park 2")
        dead.close()  # the client goes away while parked
        fx.wait_until(lambda: waiting(s, "d") == 1, what="the dead waiter to leave")
        s.request("DELETE", "/v1/leases/" + lease["lease"])
        assert follower.wait()[0] == 200
        follower.close()


def test_pitfall28_lock_keys_vanish_when_unused():
    with fx.Semad() as s:
        st, l1 = s.json("POST", "/v1/locks/tmp/acquire", {"mode": "exclusive", "ttl_ms": 1000})
        assert st == 200
        # held while the lease lives (on a loaded machine the second may be over already)
        assert s.request("GET", "/v1/locks/tmp")[0] == 200 or \
            problem(s, "GET", "/v1/leases/" + l1["lease"]) == (410, "lease_expired")
        fx.wait_until(lambda: s.request("GET", "/v1/locks/tmp")[0] == 404, timeout=15,
                      what="the key to vanish after expiry")
        st, l2 = s.json("POST", "/v1/locks/tmp2/acquire", {})
        s.request("DELETE", "/v1/leases/" + l2["lease"])
        assert s.request("GET", "/v1/locks/tmp2")[0] == 404
        if not fx.ON_CLUSTER:  # (there, each instance counts the slots it has used)
            assert healthz(s)[1]["locks"] == 0


def test_pitfall29_timeout_zero_means_try_once():
    with fx.Semad() as s:
        put(s, "z", 1)
        st, lease = acquire(s, "z", timeout_ms=0)
        assert st == 200
        assert problem(s, "POST", "/v1/semaphores/z/acquire", {"timeout_ms": 0}) == \
            (409, "unavailable")
        assert problem(s, "POST", "/v1/semaphores/z/acquire", {"timeout_ms": -1})[0] == 400
        p = Parked(s, "z", {})  # absent timeout: wait for as long as it takes
        fx.wait_until(lambda: waiting(s, "z") == 1, what="park")
        time.sleep(0.3)
        assert not p.done.is_set()
        s.request("DELETE", "/v1/leases/" + lease["lease"])
        assert p.wait()[0] == 200
        p.close()


def test_pitfall30_retried_acquire_grants_once():
    with fx.Semad() as s:
        put(s, "i", 2)
        a = acquire(s, "i", idem="req-1", owner="x")
        b = acquire(s, "i", idem="req-1", owner="x")
        assert a[0] == 200 and b[0] == 200 and a[1]["lease"] == b[1]["lease"], (a, b)
        assert s.json("GET", "/v1/semaphores/i")[1]["held"] == 1
        c = acquire(s, "i", idem="req-2")
        assert c[1]["lease"] != a[1]["lease"]
        assert s.json("GET", "/v1/semaphores/i")[1]["held"] == 2
        # a retry while the first attempt is still parked does not queue twice
        first = s.raw()
        first.sendall(fx.raw_request("POST", "/v1/semaphores/i/acquire", {},
                                     {"Idempotency-Key": "req-3"}))
        fx.wait_until(lambda: waiting(s, "i") == 1, what="park")
        retry = s.raw()
        rf = retry.makefile("rb")
        retry.sendall(fx.raw_request("POST", "/v1/semaphores/i/acquire", {},
                                     {"Idempotency-Key": "req-3"}))
        time.sleep(0.2)
        assert waiting(s, "i") == 1, "the retry queued a second time"
        s.request("DELETE", "/v1/leases/" + a[1]["lease"])
        st, hd, data = fx.read_response(rf)
        assert st == 200, (st, data)
        assert s.json("GET", "/v1/semaphores/i")[1]["held"] == 2
        assert s.json("GET", "/v1/semaphores/i")[1]["waiting"] == 0
        retry.close()
        first.close()



def test_idempotency_key_replaced_and_mismatch():
    """A key names one request. Reused with another weight it fails 409
    idempotency_key_mismatch (granted or parked: no second grant, no borrowed lease); a
    parked attempt that a retry with the same key took over ends 409
    idempotency_key_replaced (not 410 deleted: the semaphore is there)."""
    with fx.Semad() as s:
        put(s, "ik", 3)
        a = acquire(s, "ik", weight=1, idem="k-1")
        assert a[0] == 200, a
        st, code = problem(s, "POST", "/v1/semaphores/ik/acquire", {"weight": 2},
                           {"Idempotency-Key": "k-1"})
        assert (st, code) == (409, "idempotency_key_mismatch"), (st, code)
        assert s.json("GET", "/v1/semaphores/ik")[1]["held"] == 1
        assert acquire(s, "ik", weight=1, idem="k-1")[1]["lease"] == a[1]["lease"]
        b = acquire(s, "ik", weight=2)  # full now
        first = s.raw()
        ff = first.makefile("rb")
        first.sendall(fx.raw_request("POST", "/v1/semaphores/ik/acquire", {"weight": 3},
                                     {"Idempotency-Key": "k-2"}))
        fx.wait_until(lambda: waiting(s, "ik") == 1, what="park")
        st, code = problem(s, "POST", "/v1/semaphores/ik/acquire", {"weight": 1},
                           {"Idempotency-Key": "k-2"})
        assert (st, code) == (409, "idempotency_key_mismatch"), (st, code)
        assert waiting(s, "ik") == 1  # the first attempt waits on
        retry = s.raw()
        rf = retry.makefile("rb")
        retry.sendall(fx.raw_request("POST", "/v1/semaphores/ik/acquire", {"weight": 3},
                                     {"Idempotency-Key": "k-2"}))
        st, hd, data = fx.read_response(ff)
        assert st == 409 and json.loads(data)["code"] == "idempotency_key_replaced", (st, data)
        assert waiting(s, "ik") == 1
        s.request("DELETE", "/v1/leases/" + a[1]["lease"])
        s.request("DELETE", "/v1/leases/" + b[1]["lease"])
        st, hd, data = fx.read_response(rf)
        assert st == 200 and json.loads(data)["weight"] == 3, (st, data)
        assert s.json("GET", "/v1/semaphores/ik")[1]["held"] == 3
        first.close()
        retry.close()


def test_limits_served_beside_requests_on_several_semaphores():
    """Several semaphores at once, tenants and rates, each beside the others: every back end
    serves them all (on Redis Cluster a request on several semaphores needs names that share
    a hash tag: others get a clear 400 and change nothing)."""
    with fx.Semad() as s:
        put(s, "lim-a", 2)
        put(s, "lim-b", 2)
        asks = [
            ("PUT", "/v1/semaphores/lim-c", {"capacity": 1, "tenant_max": 1}, 201),
            ("PUT", "/v1/semaphores/lim-d", {"capacity": 1, "rate_per_s": 5}, 201),
            ("PATCH", "/v1/semaphores/lim-a", {"rate_per_s": 5, "rate_burst": 2}, 200),
            ("PATCH", "/v1/semaphores/lim-a", {"tenant_max": 1}, 200),
            ("POST", "/v1/semaphores/lim-b/acquire", {"tenant": "acme", "timeout_ms": 0}, 200),
            ("POST", "/v1/acquire", {"semaphores": [{"name": "lim-a"}, {"name": "lim-b"}],
                                     "timeout_ms": 0}, 200),
            ("POST", "/v1/semaphores/lim-b/tickets", {"tenant": "acme"}, 201),
            ("POST", "/v1/tickets", {"semaphores": [{"name": "lim-a"}, {"name": "lim-b"}]},
             201),
        ]
        for method, path, body, ok in asks:
            if fx.ON_CLUSTER and "semaphores" in body:
                # (lim-a and lim-b are in two slots: that is said, and nothing changes)
                st, code = problem(s, method, path, body)
                assert (st, code) == (400, "invalid_request"), (method, path, st, code)
                continue
            st, reply = s.json(method, path, body)
            assert st == ok, (method, path, st, reply)
        st, v = s.json("GET", "/v1/semaphores/lim-a")
        assert st == 200 and v["tenant_max"] == 1 and v["rate_per_s"] == 5, v
        # (the request on both holds a unit of lim-a; the ticket, of the same tenant (none),
        # waits: that tenant is at lim-a's tenant_max)
        assert (v["held"], v["waiting"]) == ((0, 0) if fx.ON_CLUSTER else (1, 1)), v
        # a lease on two semaphores without limits (one slot's on Redis Cluster), then a
        # tenant and a tenant_max beside it: its unit counts for the requests naming none
        e, f = ("{lim}e", "{lim}f") if fx.ON_CLUSTER else ("lim-e", "lim-f")
        put(s, e, 2)
        put(s, f, 2)
        st, lease = s.json("POST", "/v1/acquire", {"semaphores": [{"name": e}, {"name": f}],
                                                   "timeout_ms": 0})
        assert st == 200 and sorted(lease["fences"]) == sorted([e, f]), (st, lease)
        beside = [
            ("POST", "/v1/semaphores/%s/acquire" % e, {"tenant": "acme", "timeout_ms": 0}, 200),
            ("PATCH", "/v1/semaphores/" + f, {"tenant_max": 1}, 200),
            ("POST", "/v1/acquire", {"semaphores": [{"name": f}], "tenant": "acme",
                                     "timeout_ms": 0}, 200),
            ("POST", "/v1/acquire", {"semaphores": [{"name": e}, {"name": f}],
                                     "tenant": "acme", "timeout_ms": 0}, 409),
        ]
        for method, path, body, ok in beside:
            st, reply = s.json(method, path, body)
            assert st == ok, (method, path, st, reply)
        for name in (e, f):
            st, v = s.json("GET", "/v1/semaphores/" + name)
            assert st == 200 and v["held"] == 2 and v["waiting"] == 0, v
            assert [h.get("multi") for h in v["holders"] if h["lease"] == lease["lease"]] == \
                [True], v
            tenants = {t.get("tenant"): t["held"] for t in v.get("tenants", [])}
            assert tenants == {None: 1, "acme": 1}, v


if __name__ == "__main__":
    fx.main(globals())
