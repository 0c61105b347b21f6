# SPDX-License-Identifier: MIT
"""test_redis_tickets.py - tickets on semad's Redis back end, across instances: a ticket
taken on one instance is read, long-polled, streamed and deleted on others; it is granted in
the same FIFO as long-poll acquires parked on any instance; a long-poll on another instance
hears of the grant by message (not by its poll interval); a keepalive runs out with no
traffic at all; the instance that took a ticket can die (kill -9) without the ticket going
(a ticket belongs to no instance); an Idempotency-Key retry on another instance gets the same
ticket; the estimate is the same on every instance; and a semaphore without tickets costs
no Redis command more than before.

The HTTP suite test_tickets.py also runs on one and on three instances round robin
(redis.tickets.*, redis3.tickets.*). Each case here starts its own redis-server and semad
instances on loopback ports, and skips when semad has no Redis back end."""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis_fixture as rf  # noqa: E402
import semad_fixture as fx  # noqa: E402
from test_tickets import hold, put, read, release, ticket  # noqa: E402  (the suite's helpers)

SLOW = fx.SLOW
# the ops semad sends on its own timers, whatever the requests: the sweep of due deadlines
# and the instance's heartbeat (src/backends/redis/redis_proto.h)
TIMED_OPS = {"sweep", "beat"}


def problem(s, method, path):
    st, hd, data = s.request(method, path)
    assert hd.get("content-type") == "application/problem+json", (st, hd, data)
    return st, json.loads(data)


class LongPoll(threading.Thread):
    """A request on its own connection to one instance: its status and body once answered."""

    def __init__(self, inst, method, path, body=None):
        super().__init__(daemon=True)
        self.inst, self.method, self.path, self.body = inst, method, path, body
        self.conn = inst.conn(timeout=60)
        self.status = self.reply = None
        self.at = None

    def run(self):
        st, _, data = fx.do_request(self.conn, self.method, self.path, self.body)
        self.at = time.monotonic()
        self.status, self.reply = st, json.loads(data) if data else None

    def result(self, timeout=15):
        self.join(timeout * SLOW)
        assert not self.is_alive(), "%s %s was never answered" % (self.method, self.path)
        return self.status, self.reply


def test_taken_on_one_read_and_long_polled_on_another_granted_after_a_release_on_a_third():
    # a long poll interval: the long-poll on B must hear of the grant by message, not by poll
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 3, "--ticket-poll", "20s") as f:
        a, b, c = f[0], f[1], f[2]
        put(a, "x", 1)
        lease = hold(a, "x")
        t = ticket(a, "x", keepalive_ms=60000, owner="t")
        assert t["status"] == "waiting" and t["position"] == 1 and t["poll_after_ms"] == 20000
        st, body = read(b, t["ticket"])
        assert st == 200 and body["ticket"] == t["ticket"] and body["position"] == 1, body
        lp = LongPoll(b, "GET", "/v1/tickets/%s?wait=30s" % t["ticket"])
        lp.start()
        fx.wait_until(lambda: "semad_ticket_watchers 1" in b.request("GET", "/metrics")[2]
                      .decode(), 10, "the long-poll on B")
        released = time.monotonic()
        release(c, lease)
        st, body = lp.result()
        assert st == 200 and body["status"] == "granted", body
        assert lp.at - released < 5 * SLOW, "the long-poll waited for its poll interval"
        got = body["lease"]
        assert got["weight"] == 1 and got["owner"] == "t"
        # the lease is a lease like any other, on any instance; once it ends, so does the ticket
        st, body = c.json("GET", "/v1/leases/" + got["lease"])
        assert st == 200 and body["fence"] == got["fence"], body
        release(a, got["lease"])
        st, body = problem(b, "GET", "/v1/tickets/" + t["ticket"])
        assert (st, body["code"]) == (410, "ticket_ended"), body
        assert body["detail"] == "the ticket's lease has ended", body


def test_one_fifo_with_long_poll_acquires_parked_on_other_instances():
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 3) as f:
        put(f[0], "q", 1)
        lease = hold(f[0], "q")
        order = []
        acq1 = LongPoll(f[1], "POST", "/v1/semaphores/q/acquire", {"weight": 1})
        acq1.start()
        fx.wait_until(lambda: f[2].json("GET", "/v1/semaphores/q")[1]["waiting"] == 1, 10,
                      "the acquire on B to park")
        t = ticket(f[2], "q", keepalive_ms=60000)
        acq2 = LongPoll(f[0], "POST", "/v1/semaphores/q/acquire", {"weight": 1})
        acq2.start()
        fx.wait_until(lambda: f[1].json("GET", "/v1/semaphores/q")[1]["waiting"] == 3, 10,
                      "the acquire on A to park")
        kinds = [w.get("kind", "acquire") for w in f[0].json("GET", "/v1/semaphores/q")[1]["waiters"]]
        assert kinds == ["acquire", "ticket", "acquire"], kinds
        assert read(f[0], t["ticket"])[1]["position"] == 2
        release(f[2], lease)
        st, body = acq1.result()
        assert st == 200, body
        order.append("acq1")
        # positions only go down: the ticket is next now
        assert read(f[1], t["ticket"])[1]["position"] == 1
        release(f[0], body["lease"])
        st, body = read(f[1], t["ticket"], wait="10s")
        assert body["status"] == "granted", body
        assert acq2.is_alive(), "the acquire behind the ticket was granted before it"
        release(f[2], body["lease"]["lease"])
        st, body = acq2.result()
        assert st == 200, body
        release(f[1], body["lease"])


def test_exact_positions_and_ahead_weight_with_mixed_weights_and_a_cancel_in_the_middle():
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 3) as f:
        put(f, "m", 5)
        held = hold(f, "m", 5)
        weights = [3, 1, 5, 2, 4, 1, 2]
        ids = [ticket(f, "m", weight=w, keepalive_ms=60000)["ticket"] for w in weights]
        st, _, _ = f.request("DELETE", "/v1/tickets/" + ids[2])
        assert st == 204
        ahead, ahead_w = 0, 0
        for i, tid in enumerate(ids):
            if i == 2:
                continue
            for inst in f.live():  # every instance answers the same
                st, body = read(inst, tid)
                assert (body["position"], body["ahead_weight"]) == (ahead + 1, ahead_w), (i, body)
            ahead += 1
            ahead_w += weights[i]
        assert f.json("GET", "/v1/semaphores/m")[1]["waiting_weight"] == ahead_w
        release(f, held)
        # 3 fits, then 1 (4 of 5 held), then 2 does not fit: FIFO stops there
        st, b0 = read(f, ids[0], wait="10s")
        assert b0["status"] == "granted", b0
        fx.wait_until(lambda: read(f, ids[1])[1]["status"] == "granted", 10, "the second grant")
        st, body = read(f, ids[3])
        assert body["status"] == "waiting" and body["position"] == 1 and body["ahead_weight"] == 0


def test_positions_and_ahead_weight_match_a_model_through_grants_and_departures():
    # random tickets of mixed weights through three instances; tickets leave from anywhere,
    # the head is granted by releases; after every step each waiting ticket's place and the
    # weight ahead of it are those of the model (the places outgrow several powers of two)
    import random
    rnd = random.Random(1234)
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 3) as f:
        cap = 4
        put(f, "r", cap)
        queue, leases, avail = [], [hold(f, "r", cap)], 0

        def admit():
            nonlocal avail
            while queue and queue[0][1] <= avail:
                tid, w = queue.pop(0)
                avail -= w
                st, body = read(f, tid)
                assert st == 200 and body["status"] == "granted", (tid, body)
                leases.append(body["lease"]["lease"])
        for step in range(160):
            r = rnd.random()
            if r < 0.55 or not queue:
                w = rnd.randint(1, 3)
                t = ticket(f, "r", weight=w, keepalive_ms=60000)
                if t["status"] == "granted":
                    assert not queue and w <= avail, (t, queue, avail)
                    avail -= w
                    leases.append(t["lease"]["lease"])
                else:
                    queue.append((t["ticket"], w))
            elif r < 0.8:
                tid, w = queue.pop(rnd.randrange(len(queue)))
                st, _, _ = f.request("DELETE", "/v1/tickets/" + tid)
                assert st == 204
                admit()
            elif leases:
                lease = leases.pop(rnd.randrange(len(leases)))
                st, body = f.json("GET", "/v1/leases/" + lease)
                assert st == 200, body
                release(f, lease)
                avail += body["weight"]
                admit()
            ahead_w = 0
            for i, (tid, w) in enumerate(queue):
                if i % 3 == step % 3 or i < 2:  # a third of them each step, and the heads
                    st, body = read(f, tid)
                    assert st == 200 and body["status"] == "waiting", (step, tid, body)
                    assert (body["position"], body["ahead_weight"]) == (i + 1, ahead_w), \
                        (step, i, body)
                ahead_w += w


def test_a_queue_that_never_runs_out_of_tickets_keeps_a_tree_the_size_of_its_span():
    # tickets join at the tail and leave from the head (and now and then from the middle)
    # for 600 places while a few always wait: the tree of the weight that left (:fw) is
    # folded behind the head, so it stays the size of the queue's span, not one field per
    # place the queue ever had; the weight ahead of every ticket stays that of the model
    import random
    rnd = random.Random(35)
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 2) as f:
        put(f, "span", 3)
        hold(f, "span", 3)
        queue = []
        for step in range(600):
            w = rnd.randint(1, 3)
            queue.append((ticket(f, "span", weight=w, keepalive_ms=60000)["ticket"], w))
            if len(queue) > 6:
                tid, _ = queue.pop(rnd.randrange(3) if rnd.random() < 0.2 else 0)
                st, _, _ = f.request("DELETE", "/v1/tickets/" + tid)
                assert st == 204
            if step % 50 == 49:
                ahead_w = 0
                for i, (tid, w) in enumerate(queue):
                    st, body = read(f, tid)
                    assert st == 200 and body["status"] == "waiting", (step, tid, body)
                    assert (body["position"], body["ahead_weight"]) == (i + 1, ahead_w), \
                        (step, i, body)
                    ahead_w += w
        key = [k for k in redis.cli("KEYS", "*span:fw").split() if k]
        assert len(key) == 1, key
        fields = int(redis.cli("HLEN", key[0]).strip())
        folded = int(redis.cli("HGET", key[0], "o").strip() or "0")
        assert fields <= 64, fields  # 594 places have left; the span is 7 to 9 places
        assert folded >= 500, folded  # the places folded behind the head


def test_keepalive_runs_out_with_no_traffic_and_an_uncollected_grant_goes_back():
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 2) as f:
        put(f[0], "k", 1)
        lease = hold(f[0], "k")
        w = ticket(f[0], "k", keepalive_ms=500)  # never read again
        g = ticket(f[1], "k", keepalive_ms=60000)
        # nobody sends anything: the due time in Redis drives one instance's sweep
        fx.wait_until(lambda: redis.cli("EXISTS", "sema:tk:" + w["ticket"]).strip() == "1"
                      and redis.cli("GET", "sema:tk:" + w["ticket"]).startswith("X"),
                      10, "the unread ticket to be dropped")
        st, body = problem(f[1], "GET", "/v1/tickets/" + w["ticket"])
        assert (st, body["code"]) == (410, "ticket_ended"), body
        assert body["detail"] == "the ticket was dropped: nobody read it for keepalive_ms"
        assert read(f[0], g["ticket"])[1]["position"] == 1
        # a grant nobody collects within its keepalive goes back
        u = ticket(f[0], "k", keepalive_ms=600)
        release(f[1], lease)
        # g is granted now (read: collected); u waits behind it
        st, body = read(f[1], g["ticket"])
        assert body["status"] == "granted", body
        release(f[0], body["lease"]["lease"])
        # u is granted by that release; nobody reads it
        fx.wait_until(lambda: redis.cli("GET", "sema:tk:" + u["ticket"]).startswith("X"),
                      10, "the uncollected grant to go back")
        st, body = problem(f[0], "GET", "/v1/tickets/" + u["ticket"])
        assert body["detail"] == ("the ticket's lease was released: nobody collected it "
                                  "within keepalive_ms"), body
        view = f[1].json("GET", "/v1/semaphores/k")[1]
        assert view["available"] == 1 and view["held"] == 0, view
        text = f.metrics_text()
        assert "semad_tickets_abandoned_total 1" in text
        assert "semad_tickets_uncollected_total 1" in text


def test_an_instance_killed_does_not_take_its_tickets_with_it():
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 2) as f:
        put(f[0], "d", 1)
        lease = hold(f[1], "d")
        t = ticket(f[0], "d", keepalive_ms=60000)
        f.kill9(0)
        # past the bound in which a dead instance's parked requests leave the queue (8 s of
        # Redis's clock after its last renewal, whatever the build)
        deadline = time.monotonic() + 11
        while time.monotonic() < deadline:
            st, body = read(f[1], t["ticket"])
            assert st == 200 and body["position"] == 1, body
            time.sleep(0.5)
        release(f[1], lease)
        st, body = read(f[1], t["ticket"], wait="10s")
        assert body["status"] == "granted", body


def test_idempotency_key_retry_on_another_instance_and_delete_from_a_third():
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 3) as f:
        put(f[0], "i", 1)
        hold(f[0], "i")
        key = {"Idempotency-Key": "k-1"}
        t1 = ticket(f[0], "i", headers=key, keepalive_ms=60000)
        t2 = ticket(f[1], "i", headers=key, keepalive_ms=60000)
        assert t2["ticket"] == t1["ticket"] and t2["position"] == 1, (t1, t2)
        st, body = f[2].json("POST", "/v1/semaphores/i/tickets", {"weight": 1}, key)
        assert st == 200, (st, body)  # a retry: not created again
        st, _, _ = f[2].request("DELETE", "/v1/tickets/" + t1["ticket"])
        assert st == 204
        st, body = problem(f[0], "GET", "/v1/tickets/" + t1["ticket"])
        assert (st, body["detail"]) == (410, "the ticket left the line"), body
        st, body = problem(f[1], "DELETE", "/v1/tickets/" + t1["ticket"])
        assert st == 410, body
        st, body = problem(f[1], "GET", "/v1/tickets/AAAAAAAAAAAAAAAAAAAAAAAA")
        assert (st, body["code"]) == (404, "not_found"), body


def test_deleting_the_semaphore_on_one_instance_ends_a_stream_on_another():
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 2) as f:
        put(f[0], "del", 1)
        hold(f[0], "del")
        t = ticket(f[0], "del", keepalive_ms=60000)
        conn = f[1].conn(timeout=30)
        conn.request("GET", "/v1/tickets/%s/events" % t["ticket"])
        resp = conn.getresponse()
        assert resp.status == 200
        got = b""
        while b"event: waiting" not in got:  # the ticket's state first
            line = resp.fp.readline()
            assert line, got
            got += line
        st, _, _ = f[0].request("DELETE", "/v1/semaphores/del")
        assert st == 204
        got = b""
        while b"semaphore was deleted" not in got:  # bounded by the connection's timeout
            line = resp.fp.readline()
            if not line:
                break
            got += line
        assert b"event: ended" in got and b"semaphore was deleted" in got, got
        conn.close()


def test_watchers_are_answered_when_their_instance_stops_and_the_ticket_stays():
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 2, "--ticket-poll", "50ms") as f:
        put(f[0], "s", 1)
        lease = hold(f[0], "s")
        t = ticket(f[0], "s", keepalive_ms=60000)
        polls = [LongPoll(f[1], "GET", "/v1/tickets/%s?wait=60s" % t["ticket"])
                 for _ in range(3)]
        for p in polls:
            p.start()
        fx.wait_until(lambda: "semad_ticket_watchers 3" in f[1].request("GET", "/metrics")[2]
                      .decode(), 10, "the long-polls on B")
        # reads in flight and between reads (every 50 ms) while it stops: all answered
        rc = f[1].stop()
        f.gone.add(1)
        assert rc == 0, "\n".join(f[1].log()[-20:])
        for p in polls:
            st, body = p.result()
            assert st == 503, (st, body)
        assert read(f[0], t["ticket"])[1]["position"] == 1
        release(f[0], lease)
        assert read(f[0], t["ticket"], wait="10s")[1]["status"] == "granted"


def test_the_estimate_is_the_same_on_every_instance():
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 3) as f:
        put(f, "e", 2)
        # samples are taken while the semaphore has tickets: this one holds a unit meanwhile
        first = ticket(f, "e", keepalive_ms=60000)
        assert first["status"] == "granted"
        for _ in range(7):
            release(f, hold(f, "e"))
        lease = hold(f, "e")
        t = ticket(f, "e", keepalive_ms=60000)
        assert t["estimate_ms"] is None, t  # 7 holds: not enough yet
        release(f, lease)  # the 8th: t is granted, and another waits behind a new holder
        st, body = read(f, t["ticket"])
        assert body["status"] == "granted", body
        t = ticket(f, "e", keepalive_ms=60000)
        assert t["status"] == "waiting" and t["estimate_ms"] is not None, t
        ests = {json.dumps(read(inst, t["ticket"])[1]["estimate_ms"]) for inst in f.live()}
        assert len(ests) == 1, ests


def test_a_semaphore_without_tickets_costs_no_command_more():
    """50 holds and releases cost one FCALL each, of their own op, and no publish; each goes
    with its arguments in one (redis_proto.h: RS_PK_*). Counted by op (MONITOR): semad's own
    timed commands (housekeeping, heartbeats), which a slow run overlaps more of, are not the
    requests' cost."""
    with rf.RedisServer() as redis, rf.Fleet(redis.url(), 1) as f:
        put(f, "p", 1)
        release(f, hold(f, "p"))
        mon = rf.Monitor(redis.port)
        try:
            t0 = time.time()
            before = redis.commandstats()
            for _ in range(50):
                release(f, hold(f, "p"))
            after = redis.commandstats()
            fx.wait_until(lambda: mon.fcalls(t0).get("lease_release", 0) >= 50, 10,
                          "MONITOR's lines of the 50 releases")
            ops, packed = mon.fcalls(t0), mon.fcalls(t0, packed=True)
        finally:
            mon.close()
        calls = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        print("FCALLs by op: %s" % ops)
        assert ops.get("acquire") == 50 and ops.get("lease_release") == 50, ops
        assert packed == {"acquire": 50, "lease_release": 50}, (packed, ops)
        own = {op for op in ops if op not in ("acquire", "lease_release")}
        assert own <= TIMED_OPS, ("FCALLs the requests should not cost", ops)
        assert not any(k.startswith("publish") and v for k, v in calls.items()), calls


if __name__ == "__main__":
    fx.main(globals())
