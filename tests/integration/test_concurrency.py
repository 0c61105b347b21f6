# SPDX-License-Identifier: MIT
"""test_concurrency.py - 100 client threads doing random acquire / renew / release /
timeout / disconnect against a few semaphores on the real semad, then a checker over the
clients' own timestamps.

Why the checks are sound (they cannot fail on a correct server):
- Capacity: a lease is surely held on the server from the moment its client RECEIVED the
  grant until the moment the client SENT its release (the grant happened before the reply
  arrived; the release happens after the request left). Only leases whose release answered
  204 count (an expired or revoked lease ended at an unknown time). If the weights of the
  surely-held intervals overlapping at some instant exceed the capacity, the server really
  admitted too much. Leases we never saw (a disconnect raced a grant) are left out, which
  can only under-count.
- FIFO: with strict FIFO and head-of-line blocking, two queued requests that are both
  granted are granted in queue order, and the fence (strictly increasing per semaphore)
  records the grant order. The queue order is read from the server itself: a monitor thread
  keeps reading each semaphore's waiters (every request carries a unique owner), and
  whenever it saw A queued ahead of B, fence(A) < fence(B) must hold if both were granted.
  (Client send times say nothing sound here: a thread may be descheduled between taking
  the time and writing the request.)
"""
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402

THREADS = 100
SEMS = {"c1": 1, "c2": 2, "c5": 5}
DURATION = max(2.0, 6.0 * min(1.0, fx.SCALE))
TTL = 20000


class Client(threading.Thread):
    def __init__(self, s, idx, start, records, errors):
        super().__init__(daemon=True)
        self.idx, self.count = idx, 0
        self.s, self.rng, self.start_evt = s, random.Random(1000 + idx), start
        self.records, self.errors = records, errors
        self.conn = None

    def http(self, method, path, body=None):
        for attempt in range(2):
            if self.conn is None:
                self.conn = self.s.conn(timeout=30)
            try:
                return fx.do_request(self.conn, method, path, body)
            except (OSError, EOFError, fx.http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise

    def run(self):
        self.start_evt.wait()
        end = time.monotonic() + DURATION
        try:
            while time.monotonic() < end:
                self.one()
        except Exception as e:  # reported by the main thread
            self.errors.append(repr(e))
        if self.conn:
            self.conn.close()

    def one(self):
        sem = self.rng.choice(list(SEMS))
        weight = self.rng.randint(1, SEMS[sem])
        r = self.rng.random()
        if r < 0.1:
            return self.disconnect(sem, weight)
        self.count += 1
        owner = "c%d-%d" % (self.idx, self.count)
        body = {"weight": weight, "ttl_ms": TTL, "owner": owner}
        if r < 0.4:
            body["timeout_ms"] = self.rng.choice([0, 5, 20, 100])
        elif r < 0.6:
            body["timeout_ms"] = 2000
        st, _, data = self.http("POST", "/v1/semaphores/%s/acquire" % sem, body)
        t_recv = time.monotonic()
        if st != 200:
            code = json.loads(data).get("code")
            if (st, code) not in ((409, "timeout"), (409, "unavailable")):
                raise AssertionError("acquire answered %d %s" % (st, data))
            return
        lease = json.loads(data)
        time.sleep(self.rng.random() * 0.02)
        ok = True
        if self.rng.random() < 0.3:
            st, _, data = self.http("POST", "/v1/leases/%s/renew" % lease["lease"],
                                    {"ttl_ms": TTL})
            ok = st == 200
        t_rel = time.monotonic()
        st, _, _ = self.http("DELETE", "/v1/leases/" + lease["lease"])
        ok = ok and st == 204
        self.records.append(dict(sem=sem, owner=owner, weight=weight, fence=lease["fence"],
                                 recv=t_recv, rel=t_rel, ok=ok))

    def disconnect(self, sem, weight):
        """Park (or try to) and go away without reading the answer."""
        sock = self.s.raw()
        sock.sendall(fx.raw_request("POST", "/v1/semaphores/%s/acquire" % sem,
                                    {"weight": weight, "ttl_ms": 2000}))
        time.sleep(self.rng.random() * 0.03)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()


def check_capacity(records):
    worst = {}
    for sem, cap in SEMS.items():
        ev = []
        for r in records:
            if r["sem"] == sem and r["ok"]:
                ev.append((r["recv"], 1, r["weight"]))
                ev.append((r["rel"], 0, -r["weight"]))  # at a tie, releases count first
        ev.sort()
        held = peak = 0
        for t, _, w in ev:
            held += w
            peak = max(peak, held)
            assert held <= cap, "%s: %d units surely held at t=%.4f, capacity %d" % (
                sem, held, t, cap)
        worst[sem] = peak
    return worst


class QueueMonitor(threading.Thread):
    """Reads every semaphore's queue over and over; remembers each ordered pair of owners
    it saw queued (A ahead of B)."""

    def __init__(self, s):
        super().__init__(daemon=True)
        self.s, self.stop, self.ahead, self.error = s, threading.Event(), set(), None

    def run(self):
        try:
            conn = self.s.conn(timeout=30)
            while not self.stop.is_set():
                for sem in SEMS:
                    st, _, data = fx.do_request(conn, "GET", "/v1/semaphores/" + sem)
                    assert st == 200, (st, data)
                    queue = [w["owner"] for w in json.loads(data)["waiters"]
                             if w.get("owner")]
                    for i, a in enumerate(queue):
                        for b in queue[i + 1:]:
                            self.ahead.add((a, b))
            conn.close()
        except Exception as e:  # reported by the main thread
            self.error = repr(e)


def check_fifo(records, ahead):
    fence = {r["owner"]: (r["sem"], r["fence"]) for r in records}
    pairs = 0
    for a, b in ahead:
        if a in fence and b in fence:
            pairs += 1
            assert fence[a][1] < fence[b][1], (
                "%s: %s was queued ahead of %s but granted after it (fences %d, %d)" % (
                    fence[a][0], a, b, fence[a][1], fence[b][1]))
    return pairs


def test_random_clients_never_over_admit_and_stay_fifo():
    with fx.Semad("--max-connections", "1000") as s:
        for name, cap in SEMS.items():
            assert s.json("PUT", "/v1/semaphores/" + name, {"capacity": cap})[0] == 201
        start, records, errors = threading.Event(), [], []
        clients = [Client(s, i, start, records, errors) for i in range(THREADS)]
        monitor = QueueMonitor(s)
        for c in clients:
            c.start()
        monitor.start()
        start.set()
        for c in clients:
            c.join(DURATION + 60 * fx.SLOW)
            assert not c.is_alive(), "a client thread hung"
        monitor.stop.set()
        monitor.join(30 * fx.SLOW)
        assert monitor.error is None, monitor.error
        assert not errors, errors[:5]
        assert len(records) > 50, "too few grants to say anything: %d" % len(records)
        peaks = check_capacity(records)
        pairs = check_fifo(records, monitor.ahead)
        assert pairs > 0, "the monitor never saw two granted requests queued together"
        assert any(peaks[n] == SEMS[n] for n in SEMS), ("no contention observed", peaks)
        # every unit comes back: releases, cancellations, undelivered grants, ttl expiry
        def idle():
            for n, cap in SEMS.items():
                sem = s.json("GET", "/v1/semaphores/" + n)[1]
                if sem["held"] != 0 or sem["waiting"] != 0 or sem["available"] != cap:
                    return False
            return True
        fx.wait_until(idle, timeout=15, what="every unit to come back")
        print("%d grants checked, peaks %s, %d ordered pairs" % (len(records), peaks, pairs))


if __name__ == "__main__":
    fx.main(globals())
