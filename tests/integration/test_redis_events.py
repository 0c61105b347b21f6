# SPDX-License-Identifier: MIT
"""test_redis_events.py - event streams across semad instances on one Redis: ids that mean
the same on every instance, so a client that reconnects to another instance with
Last-Event-ID (as behind a load balancer) gets exactly the events it missed, in order, then
the live ones; an id older than the log (trimmed), from an earlier run of the log (Redis
lost its data, the semaphore was deleted and made again) or never sent gets the same
`reset` as on the embedded engine; and nothing is written to Redis for a semaphore nobody
follows.

Each case is its own CTest test (label redis); each starts its own redis-server and semad
instances on ephemeral loopback ports, and skips when semad has no Redis back end."""
import json
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis_fixture as rf  # noqa: E402
import semad_fixture as fx  # noqa: E402

SLOW = fx.SLOW
LOG_MAX = 1000  # the log keeps at least this many events per semaphore (docs/redis.md)
NOT_KEPT = "the events since Last-Event-ID are no longer kept"
NOT_THIS_RUN = "Last-Event-ID is not from this run of the semaphore's events"


def fleet(n=3):
    rf.need_redis_engine()
    r = rf.RedisServer()
    try:
        fl = rf.Fleet(r.url(), n)
    except BaseException:
        r.close()
        raise
    return r, fl


def put(s, name, cap):
    st, body = s.json("PUT", "/v1/semaphores/" + name, {"capacity": cap})
    assert st in (200, 201), (st, body)


def grant(s, name):
    st, lease = s.json("POST", "/v1/semaphores/%s/acquire" % name, {"ttl_ms": 60000})
    assert st == 200, (st, lease)
    return lease["lease"]


def release(s, lease):
    st, _, body = s.request("DELETE", "/v1/leases/" + lease)
    assert st in (200, 204), (st, body)


class Stream:
    """GET /v1/semaphores/NAME/events on one instance (with Last-Event-ID if given)."""

    def __init__(self, s, name, last_id=None):
        self.sock = s.raw()
        self.sock.settimeout(15 * SLOW)
        self.f = self.sock.makefile("rb")
        extra = "Last-Event-ID: %s\r\n" % last_id if last_id is not None else ""
        self.sock.sendall(("GET /v1/semaphores/%s/events HTTP/1.1\r\nHost: t\r\n%s\r\n"
                           % (name, extra)).encode())
        self.status = int(self.f.readline().split()[1])
        while self.f.readline() not in (b"\r\n", b""):
            pass

    def next(self):
        """The next event as a dict (id, event, data parsed), or None at the stream's end."""
        ev = {}
        while True:
            line = self.f.readline()
            if not line:
                return None
            line = line.decode().rstrip("\n")
            if line == "":
                if ev:
                    ev["data"] = json.loads(ev["data"])
                    return ev
                continue
            if line.startswith(":"):
                continue
            k, _, v = line.partition(": ")
            ev[k] = v

    def take(self, n):
        out = [self.next() for _ in range(n)]
        assert None not in out, out
        return out

    def close(self):
        self.f.close()
        self.sock.close()


def split(ev_id):
    uid, seq = ev_id.split("-")
    return uid, int(seq)


def consecutive(events, after=None):
    """The events' ids are one run, numbered one by one (after `after`, an id, if given)."""
    ids = ([after] if after else []) + [e["id"] for e in events]
    uids = {split(i)[0] for i in ids}
    seqs = [split(i)[1] for i in ids]
    assert len(uids) == 1 and seqs == list(range(seqs[0], seqs[0] + len(seqs))), ids


def stream_key(r, name):
    keys = [k for k in r.cli("--scan", "--pattern", "sema:{*}s:%s:e" % name).split() if k]
    return keys[0] if keys else None


def test_resume_on_another_instance():
    """A subscriber on A sees grants and releases made on B and C; it drops; more happens;
    it reconnects to B with its last id and gets exactly the missed events in order, then
    the live ones. Once the log has moved on past it, the id gets "reset" (on C)."""
    r, fl = fleet(3)
    with r, fl:
        a, b, c = fl[0], fl[1], fl[2]
        put(a, "ev", 1)
        sa = Stream(a, "ev")
        assert sa.status == 200
        l1 = grant(b, "ev")
        release(c, l1)
        l2 = grant(c, "ev")
        seen = sa.take(3)
        assert [e["event"] for e in seen] == ["granted", "released", "granted"], seen
        assert [e["data"]["lease"] for e in seen] == [l1, l1, l2], seen
        consecutive(seen)
        sa.close()  # the watcher drops; what follows happens while it is away
        release(b, l2)
        l3 = grant(c, "ev")
        release(b, l3)
        sb = Stream(b, "ev", seen[-1]["id"])
        missed = sb.take(3)
        assert [(e["event"], e["data"]["lease"]) for e in missed] == [
            ("released", l2), ("granted", l3), ("released", l3)], missed
        consecutive(missed, seen[-1]["id"])
        l4 = grant(a, "ev")  # live events follow, numbered on
        live = sb.next()
        assert (live["event"], live["data"]["lease"]) == ("granted", l4), live
        consecutive([live], missed[-1]["id"])
        sb.close()
        # A resume from the newest id on C: nothing replayed, the next event is live.
        sc = Stream(c, "ev", live["id"])
        release(a, l4)
        ev = sc.next()
        assert ev["event"] == "released" and ev["data"]["lease"] == l4, ev
        consecutive([ev], live["id"])
        sc.close()
        # The log keeps at least LOG_MAX events: run it past that, then the old id gets one
        # "reset" at the current point (the client reads the state again), then live ones.
        old = seen[-1]["id"]
        watcher = Stream(a, "ev")  # keeps the log running while no one else watches
        for i in range(LOG_MAX // 2 + 60):
            release(fl[i % 3], grant(fl[(i + 1) % 3], "ev"))
        last = None
        for _ in range(2 * (LOG_MAX // 2 + 60)):
            last = watcher.next()
        watcher.close()
        xlen = int(r.cli("XLEN", stream_key(r, "ev")))
        assert LOG_MAX <= xlen <= LOG_MAX + 200, xlen  # capped (MAXLEN ~)
        sc = Stream(c, "ev", old)
        rs = sc.next()
        assert rs["event"] == "reset" and rs["data"] == {"name": "ev", "reason": NOT_KEPT}, rs
        assert rs["id"] == last["id"], (rs, last)
        l5 = grant(b, "ev")
        ev = sc.next()
        assert (ev["event"], ev["data"]["lease"]) == ("granted", l5), ev
        consecutive([ev], rs["id"])
        sc.close()
        # An id from within the log still replays from there.
        sa = Stream(a, "ev", "%s-%d" % (split(last["id"])[0], split(last["id"])[1] - 5))
        got = sa.take(6)
        assert [e["id"] for e in got[:5]][-1] == last["id"] and got[5]["id"] == ev["id"], got
        sa.close()


def test_streams_on_two_instances_see_one_order():
    """Grants and releases made concurrently on B and C: the streams on A and B get the same
    events with the same ids, numbered one by one (no gap, nothing twice), whichever way
    each event reached each instance."""
    r, fl = fleet(3)
    with r, fl:
        a, b, c = fl[0], fl[1], fl[2]
        put(a, "co", 2)
        sa, sb = Stream(a, "co"), Stream(b, "co")
        rounds = 150
        errors = []
        barrier = threading.Barrier(2)

        def load(s):
            try:
                barrier.wait(10 * SLOW)
                for _ in range(rounds):
                    release(s, grant(s, "co"))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
        ts = [threading.Thread(target=load, args=(s,)) for s in (b, c)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60 * SLOW)
        assert not errors, errors
        n = 2 * 2 * rounds
        ea, eb = sa.take(n), sb.take(n)
        consecutive(ea)
        key = [(e["id"], e["event"], e["data"]["lease"]) for e in ea]
        assert key == [(e["id"], e["event"], e["data"]["lease"]) for e in eb]
        # every lease granted once and released once, the grant first
        state = {}
        for e in ea:
            lid = e["data"]["lease"]
            want = {"granted": None, "released": "granted"}[e["event"]]
            assert state.get(lid) == want, (e, state.get(lid))
            state[lid] = e["event"]
        sa.close()
        sb.close()


def test_trimmed_lost_or_deleted_log_says_reset():
    """The log's stream gone (trimmed, expired) -> "reset: no longer kept". A delete ends the
    log: the stream ends with "deleted", the name answers 404, and once it is made again an
    old id gets "reset: not from this run". Redis losing its data: a live stream is told
    ("reset", or "deleted" when the semaphore went with the data)."""
    r, fl = fleet(2)
    with r, fl:
        a, b = fl[0], fl[1]
        put(a, "tr", 1)
        sa = Stream(a, "tr")
        l1 = grant(b, "tr")
        first = sa.next()
        release(b, l1)
        assert sa.next()["event"] == "released"
        sa.close()
        r.cli("DEL", stream_key(r, "tr"))  # as if trimmed, or expired
        sb = Stream(b, "tr", first["id"])
        rs = sb.next()
        assert rs["event"] == "reset" and rs["data"]["reason"] == NOT_KEPT, rs
        # a delete on A ends B's stream; the log goes with the semaphore
        assert a.request("DELETE", "/v1/semaphores/tr")[0] in (200, 204)
        ev = sb.next()
        assert ev["event"] == "deleted" and sb.next() is None, ev
        sb.close()
        assert stream_key(r, "tr") is None
        assert Stream(b, "tr", first["id"]).status == 404
        put(b, "tr", 1)
        sa = Stream(a, "tr", first["id"])
        rs = sa.next()
        assert rs["event"] == "reset" and rs["data"]["reason"] == NOT_THIS_RUN, rs
        assert split(rs["id"])[0] != split(first["id"])[0], (rs, first)
        l2 = grant(b, "tr")
        ev = sa.next()
        assert ev["event"] == "granted" and ev["data"]["lease"] == l2, ev
        consecutive([ev], rs["id"])
        # Redis loses its data under a live stream: once A notices (its next command), the
        # stream gets "reset" (a new run of the log) or "deleted" (the semaphore is gone).
        r.cli("FLUSHALL")
        a.request("GET", "/v1/semaphores/tr")
        ev = sa.next()
        assert ev is not None and ev["event"] in ("reset", "deleted"), ev
        sa.close()


def test_lost_messages_are_read_from_the_log():
    """The subscriber connections are cut (CLIENT KILL TYPE pubsub) while changes are made
    on B: the stream on A still gets every event, in order and numbered one by one, read
    from the log when A resubscribes (or at the next event), with no "reset"."""
    r, fl = fleet(2)
    with r, fl:
        a, b = fl[0], fl[1]
        put(a, "pk", 1)
        sa = Stream(a, "pk")
        l0 = grant(b, "pk")
        first = sa.next()
        assert first["event"] == "granted", first
        for rnd in range(3):
            fx.wait_until(lambda: len(r.clients("pubsub")) >= 2, 10, "the subscribers")
            assert r.kill_pubsub() >= 1
            release(b, l0)
            l0 = grant(b, "pk")
        got = sa.take(6)
        assert [e["event"] for e in got] == ["released", "granted"] * 3, got
        consecutive(got, first["id"])
        sa.close()


def test_tickets_and_a_stream_on_one_semaphore():
    """The event log and the tickets' wait estimate are separate keys: a semaphore that is
    followed and has tickets logs every event and keeps its estimate, with no command
    refused."""
    r, fl = fleet(2)
    with r, fl:
        a, b = fl[0], fl[1]
        put(a, "te", 1)
        st = Stream(a, "te")
        assert st.status == 200
        lease = grant(b, "te")
        code, t = b.json("POST", "/v1/semaphores/te/tickets", {"keepalive_ms": 60000})
        assert code == 201 and t["status"] == "waiting", (code, t)
        for _ in range(10):  # holds and grants with a ticket in line: estimate samples
            release(b, lease)
            code, body = a.json("GET", "/v1/tickets/" + t["ticket"])
            assert code == 200 and body["status"] == "granted", (code, body)
            lease = body["lease"]["lease"]
            code, t = b.json("POST", "/v1/semaphores/te/tickets", {"keepalive_ms": 60000})
            assert code == 201 and t["status"] == "waiting", (code, t)
        release(b, lease)
        # granted and the ticket's queued (2), then released, granted and the next ticket's
        # queued per round, and the last release
        evs = st.take(33)
        assert [e["event"] for e in evs[:5]] == ["granted", "queued", "released", "granted",
                                                  "queued"], evs[:5]
        consecutive(evs)
        types = {k.split(":")[-1]: r.cli("TYPE", k).strip()
                 for k in r.cli("--scan", "--pattern", "sema:{*}s:te:*").split() if k}
        assert types.get("e") == "stream" and types.get("est") == "hash", types
        logs = "\n".join(a.log() + b.log())
        assert "a command failed" not in logs, logs
        st.close()


def park(s, name, body):
    """A long-poll acquire (or wait-idle, by `path`) sent on its own connection; returns the
    socket (closing it is the client going away)."""
    sock = s.raw()
    path = body.pop("path", "/v1/semaphores/%s/acquire" % name)
    sock.sendall(fx.raw_request("POST", path, body))
    return sock


def test_queued_and_left_on_every_instance():
    """A waiter joining the queue is a "queued" event and one leaving it without a grant a
    "left", with the waiter as the view lists it and the queue after it, whichever instance
    the waiter is on: a parked acquire, a ticket that leaves, a client that goes away, a
    timeout, a wait-idle once it is done. A waiter granted from the queue is a "granted"
    only. Both streams see the same events with the same ids."""
    r, fl = fleet(2)
    with r, fl:
        a, b = fl[0], fl[1]
        put(a, "qw", 1)
        sa, sb = Stream(a, "qw"), Stream(b, "qw")
        seen = []

        def take(n):
            evs = sa.take(n)
            seen.extend(evs)
            return evs
        holder = grant(b, "qw")
        w = park(b, "qw", {"timeout_ms": 60000, "owner": "parked"})
        evs = take(2)  # (parked once its "queued" is out)
        code, t = a.json("POST", "/v1/semaphores/qw/tickets",
                         {"keepalive_ms": 60000, "owner": "ticket-1"})
        assert code == 201 and t["status"] == "waiting", (code, t)
        assert b.request("DELETE", "/v1/tickets/" + t["ticket"])[0] == 204
        evs += take(2)
        assert [e["event"] for e in evs] == ["granted", "queued", "queued", "left"], evs
        q, qt, lt = evs[1]["data"], evs[2]["data"], evs[3]["data"]
        assert (q["owner"], q["weight"], q["waiting"], q["waiting_weight"]) == (
            "parked", 1, 1, 1), q
        assert "kind" not in q and q["since"] > 0, q
        assert (qt["owner"], qt["kind"], qt["waiting"]) == ("ticket-1", "ticket", 2), qt
        assert (lt["owner"], lt["kind"], lt["waiting"], lt["waiting_weight"]) == (
            "ticket-1", "ticket", 1, 1), lt
        w.close()  # the client goes away: its instance takes it out of the queue
        e = take(1)[0]
        assert e["event"] == "left" and e["data"]["owner"] == "parked", e
        assert e["data"]["waiting"] == 0 and e["data"]["waiting_weight"] == 0, e
        st, body = a.json("POST", "/v1/semaphores/qw/acquire",
                          {"timeout_ms": 200, "owner": "late"})
        assert st == 409, (st, body)
        evs = take(2)
        assert [(e["event"], e["data"]["owner"]) for e in evs] == [
            ("queued", "late"), ("left", "late")], evs
        idle = park(a, "qw", {"path": "/v1/semaphores/qw/wait-idle", "timeout_ms": 60000})
        evs = take(1)
        assert (evs[0]["event"], evs[0]["data"].get("kind")) == ("queued", "wait_idle"), evs
        nxt = park(b, "qw", {"timeout_ms": 60000, "owner": "next"})
        evs = take(1)
        assert (evs[0]["event"], evs[0]["data"]["owner"]) == ("queued", "next"), evs
        assert evs[0]["data"]["waiting"] == 2, evs
        # idle: the wait-idle at the head is done and leaves; "next" is granted from the
        # queue, with no "left" for it
        release(a, holder)
        evs = take(3)
        assert [(e["event"], e["data"].get("kind")) for e in evs] == [
            ("released", None), ("left", "wait_idle"), ("granted", None)], evs
        assert evs[1]["data"]["waiting"] == 1 and evs[2]["data"]["owner"] == "next", evs
        release(b, evs[2]["data"]["lease"])
        assert take(1)[0]["event"] == "released"
        idle.close()
        nxt.close()
        consecutive(seen)
        eb = sb.take(len(seen))
        assert [(e["id"], e["event"]) for e in eb] == [(e["id"], e["event"]) for e in seen]
        sa.close()
        sb.close()


def test_nothing_written_without_subscribers():
    """With nobody following a semaphore, its events cost nothing in Redis: no stream, no
    XADD, no PUBLISH (the script's one HGET finds no marker)."""
    r, fl = fleet(2)
    with r, fl:
        a, b = fl[0], fl[1]
        put(a, "quiet", 1)
        r.cli("CONFIG", "RESETSTAT")
        for i in range(20):
            release(fl[i % 2], grant(fl[(i + 1) % 2], "quiet"))
        stats = r.commandstats()
        assert "xadd" not in stats and "publish" not in stats, stats
        assert stream_key(r, "quiet") is None
        # one subscriber: each event is logged once (and published once)
        s = Stream(a, "quiet")
        r.cli("CONFIG", "RESETSTAT")
        for i in range(5):
            release(b, grant(b, "quiet"))
        assert len(s.take(10)) == 10
        stats = r.commandstats()
        assert stats.get("xadd") == 10 and stats.get("publish") == 10, stats
        s.close()


if __name__ == "__main__":
    fx.main(globals())
