# SPDX-License-Identifier: MIT
"""test_redis_faults.py - semad instances on one Redis, under the faults a fleet meets: an
instance killed (kill -9) or stopped (SIGSTOP) past the alive bound, the subscriber
connections cut (CLIENT KILL TYPE pubsub), Redis paused (CLIENT PAUSE), Redis restarted with
AOF `always` and without persistence, Sentinel failovers of a primary with one replica
and three sentinels (graceful and crash), and Sentinels that accept no connection or answer
nothing.

Each case is its own CTest test (they run in parallel); each starts its own redis-server(s)
and semad instances on ephemeral loopback ports, and skips when semad has no Redis back end.
The bounds used below are the documented ones (docs/redis.md), with margin for a noisy
machine; random load runs through the instances meanwhile and the safety checker
(safety_checker.py) checks what the clients saw."""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis_fixture as rf  # noqa: E402
import safety_checker as sc  # noqa: E402
import semad_fixture as fx  # noqa: E402

SLOW = fx.SLOW
# semad's documented bounds on Redis: a parked waiter's instance renews its alive-until every
# HEARTBEAT_S; the waiters of an instance silent for ALIVE_S leave the queue at the next
# housekeeping of their semaphore (the heartbeats of any other instance with waiters there
# run it).
HEARTBEAT_S = 2.0
ALIVE_S = 8.0
PRUNE_BOUND_S = ALIVE_S + HEARTBEAT_S + 3.0  # plus a margin
UNREACHABLE_BOUND_S = 2.0 + 3.0  # a command unanswered 2 s drops the connection: 503 then
WAKE_FALLBACK_S = HEARTBEAT_S + 3.0  # a lost wake-up message: the next collect finds it


def put(s, name, cap):
    st, body = s.json("PUT", "/v1/semaphores/" + name, {"capacity": cap})
    assert st in (200, 201), (st, body)


def acquire(s, name, **body):
    return s.json("POST", "/v1/semaphores/%s/acquire" % name, body)


def grant(s, name, **body):
    st, lease = acquire(s, name, **body)
    assert st == 200, (name, body, st, lease)
    return lease


def view(s, name):
    st, v = s.json("GET", "/v1/semaphores/" + name)
    assert st == 200, (name, st, v)
    return v


def release(s, lease):
    st = s.request("DELETE", "/v1/leases/" + lease["lease"])[0]
    assert st == 204, (lease, st)


class Parked:
    """An acquire sent on its own connection to one instance; a thread reads the answer
    (status, body) with the time it came."""

    def __init__(self, inst, name, body, path=None):
        self.sock = socket.create_connection((inst.host, inst.port), timeout=120 * SLOW)
        self.f = self.sock.makefile("rb")
        self.t_send = time.monotonic()
        self.sock.sendall(fx.raw_request("POST", path or "/v1/semaphores/%s/acquire" % name,
                                         body))
        self.result, self.t_recv = None, None
        self.done = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            st, hd, data = fx.read_response(self.f)
            self.result = (st, json.loads(data) if data else None)
        except (OSError, EOFError, ValueError):
            self.result = ("closed", None)
        self.t_recv = time.monotonic()
        self.done.set()

    def wait(self, timeout):
        assert self.done.wait(timeout * SLOW), "a parked request was not answered in %.1fs" % (
            timeout * SLOW)
        return self.result

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def waiting(s, name):
    return view(s, name)["waiting"]


def redis_fleet(n=3, *args, aof=False, durability="relaxed"):
    rf.need_redis_engine()
    r = rf.RedisServer(aof=aof)
    # strict waits for the replicas the URL names (one by default); this Redis has none
    url = r.url() + ("?replicas=0" if durability == "strict" else "")
    try:
        fl = rf.Fleet(url, n, *args, durability=durability)
    except BaseException:
        r.close()
        raise
    return r, fl


def load_over(fl, sems, **kw):
    """Random load (safety_checker.Load) through the live instances of fl."""
    for name, cap in sems.items():
        put(fl[0], name, cap)
    load = sc.Load(lambda: random.choice(fl.live()), sems, instances=fl.live, **kw)
    fl.before_close.append(load.__exit__)  # a failed test stops its clients first
    return load.start()


def is_problem(res, status, code=None):
    st, body = res
    return st == status and isinstance(body, dict) and (code is None or body.get("code") == code)


# ---- a port already taken ----

def test_port_in_use_exits_with_its_reason():
    """semad on Redis that cannot listen says why and exits; its engine is stopped cleanly
    (the listener is closed on the loop before the server is freed)."""
    r, fl = redis_fleet(1)
    with r, fl:
        taken = "127.0.0.1:%d" % fl[0].port
        out = subprocess.run([fx.semad_path(), "--listen", taken, "--engine", r.url()],
                             capture_output=True, text=True, timeout=30 * SLOW)
        assert out.returncode == 1, out
        assert "address already in use" in out.stderr, out.stderr
        assert "Assertion" not in out.stderr and "ERROR" not in out.stderr, out.stderr


# ---- kill -9 one instance under load ----

def test_kill9_instance_under_load():
    """Its parked waiters leave the queue within the bound (and those behind them are then
    served), its leases live on to their ttl (a holder can renew one through another
    instance), an expiry admits the next waiter with no other traffic, and the load through
    the other instances never sees a unit granted twice."""
    r, fl = redis_fleet(3)
    with r, fl:
        a, b, c = fl[0], fl[1], fl[2]
        put(a, "k", 2)
        put(a, "kc", 2)
        holder = grant(a, "k", weight=2, ttl_ms=60000)
        ttl_c = 4000
        t_c = time.monotonic()
        kept = grant(c, "kc", ttl_ms=ttl_c, owner="kept")   # its holder lives on elsewhere
        lost = grant(c, "kc", ttl_ms=ttl_c, owner="lost")   # its holder died with c
        t_lost = time.monotonic()  # it expires by t_lost + ttl_c on this clock
        dead = []
        for i in range(3):
            dead.append(Parked(c, "k", {"owner": "dead-%d" % i}))
            fx.wait_until(lambda: waiting(a, "k") == i + 1, 10, "waiter %d to park on c" % i)
        alive = Parked(b, "k", {"owner": "alive"})
        fx.wait_until(lambda: waiting(a, "k") == 4, 10, "the live waiter to park behind")
        nxt = Parked(b, "kc", {"owner": "next", "ttl_ms": 60000})
        fx.wait_until(lambda: waiting(a, "kc") == 1, 10, "a waiter on kc")
        # leases of 5 s: those granted through c in its last moments (answers it never sent)
        # live on until then, as any lease of a vanished holder does
        load = load_over(fl, {"l1": 1, "l3": 3}, threads=12, ttl_ms=5000)
        time.sleep(1.0)  # load through all three, then c dies
        t_kill = time.monotonic()
        fl.kill9(2)
        # its clients see their connections close
        for d in dead:
            assert d.wait(10)[0] == "closed", d.result
        # the lease held through c is still there: another instance renews it
        st, ren = a.json("POST", "/v1/leases/%s/renew" % kept["lease"], {"ttl_ms": 60000})
        assert st == 200 and ren["fence"] == kept["fence"], (st, ren)
        st, got = b.json("GET", "/v1/leases/" + lost["lease"])
        if time.monotonic() < t_c + ttl_c / 1000 - 0.5:
            assert st == 200, ("a lease vanished with its instance before its ttl", st, got)
        # c's waiters leave the queue within the bound; the live one is then first
        fx.wait_until(lambda: [w["owner"] for w in view(a, "k")["waiters"]] == ["alive"],
                      PRUNE_BOUND_S, "the dead instance's waiters to leave the queue")
        pruned_after = time.monotonic() - t_kill
        release(a, holder)
        st, lk = alive.wait(10)
        assert st == 200 and lk["owner"] == "alive", (st, lk)
        release(b, lk)
        # the lost lease expires at its ttl, and its expiry grants "next" with no request
        st, ln = nxt.wait(ttl_c / 1000 + 30)
        assert st == 200 and ln["owner"] == "next", (st, ln)
        assert nxt.t_recv >= t_c + ttl_c / 1000 - 0.05, "granted before the lost lease's ttl"
        late = nxt.t_recv - (t_lost + ttl_c / 1000)
        assert late < 2.0 * SLOW, "the expiry granted the next waiter %.2fs late" % late
        st, body = a.json("GET", "/v1/leases/" + lost["lease"])
        assert is_problem((st, body), 410, "lease_expired"), (st, body)
        release(a, ren)
        release(a, ln)
        load.stop()
        # a sanitizer build serves a fraction of the load in the same window, and c's last
        # leases hold l1 and l3 for 5 s after the kill: fewer grants there to check
        summary = load.check(min_grants=20 if SLOW == 1.0 else 5)
        sc.wait_rest(fl.live(), {"l1": 1, "l3": 3, "k": 2, "kc": 2}, timeout=10, load=load)
        alive.close()
        nxt.close()
        print("pruned %.2fs after the kill; %s" % (pruned_after, summary))


# ---- SIGSTOP / SIGCONT past the alive bound ----

def test_sigstop_instance_past_the_alive_bound():
    """A stopped instance's waiters leave the queue within the bound (not at once), a grant
    made to one of them that it never collected is given back, and once it runs again it
    answers those clients 503 instead of queueing them again, and serves as before."""
    r, fl = redis_fleet(3)
    with r, fl:
        a, b, c = fl[0], fl[1], fl[2]
        put(a, "st", 1)
        put(a, "st2", 1)
        h1 = grant(a, "st", ttl_ms=60000)
        h2 = grant(a, "st2", ttl_ms=60000)
        bw = [Parked(b, "st", {"owner": "b%d" % i}) for i in range(2)]
        fx.wait_until(lambda: waiting(a, "st") == 2, 10, "b's waiters to park")
        cw = Parked(c, "st", {"owner": "c0"})
        fx.wait_until(lambda: waiting(a, "st") == 3, 10, "c's waiter to park behind")
        g2 = Parked(b, "st2", {"owner": "b-granted"})
        fx.wait_until(lambda: waiting(a, "st2") == 1, 10, "b's waiter on st2")
        t_stop = time.monotonic()
        fl.stop_signal(1, signal.SIGSTOP)
        release(a, h2)  # granted to b's waiter, which b cannot collect while stopped
        fx.wait_until(lambda: view(a, "st2")["held"] == 1 and waiting(a, "st2") == 0, 10,
                      "st2 granted to the stopped instance's waiter")
        fx.wait_until(lambda: [w["owner"] for w in view(a, "st")["waiters"]] == ["c0"],
                      PRUNE_BOUND_S, "the stopped instance's waiters to leave the queue")
        pruned = time.monotonic() - t_stop
        assert pruned >= ALIVE_S - HEARTBEAT_S - 1.0, \
            "waiters of a live (stopped %.2fs) instance pruned before the alive bound" % pruned
        fx.wait_until(lambda: view(a, "st2")["held"] == 0, PRUNE_BOUND_S,
                      "the uncollected grant to be given back")
        assert not any(w.done.is_set() for w in bw + [g2]), "a stopped instance answered"
        release(a, h1)
        st, lc = cw.wait(10)
        assert st == 200 and lc["owner"] == "c0", (st, lc)
        fl.stop_signal(1, signal.SIGCONT)
        for w in bw + [g2]:
            res = w.wait(UNREACHABLE_BOUND_S + HEARTBEAT_S + 5)
            assert is_problem(res, 503), ("a waiter the queue dropped must get 503", res)
        assert waiting(a, "st") == 0 and view(a, "st")["held"] == 1, view(a, "st")
        release(b, lc)
        lb = grant(b, "st", timeout_ms=5000)  # b serves again
        release(c, lb)
        assert grant(b, "st2", timeout_ms=0)["weight"] == 1
        cw.close()
        print("pruned %.2fs after SIGSTOP" % pruned)


# ---- the subscriber connections cut ----

def test_pubsub_connections_killed():
    """CLIENT KILL TYPE pubsub right before a release: the message that would wake the waiter
    on another instance is lost; it is granted anyway (collected on resubscribe, or by the
    heartbeat's fallback), within a bound, every round; then the instances resubscribe."""
    r, fl = redis_fleet(3)
    with r, fl:
        a, b = fl[0], fl[1]
        put(a, "ps", 1)
        lat = []
        for rnd in range(4):
            holder = grant(a, "ps", ttl_ms=60000)
            p = Parked(b, "ps", {"owner": "p%d" % rnd})
            fx.wait_until(lambda: waiting(a, "ps") == 1, 10, "the waiter to park on b")
            fx.wait_until(lambda: len(r.clients("pubsub")) >= 1, 10, "a subscriber")
            killed = r.kill_pubsub()
            assert killed >= 1, "no subscriber connection to kill"
            t0 = time.monotonic()
            release(a, holder)
            st, lease = p.wait(WAKE_FALLBACK_S + 10)
            assert st == 200 and lease["owner"] == "p%d" % rnd, (st, lease)
            lat.append(p.t_recv - t0)
            release(a, lease)
            p.close()
        assert max(lat) < WAKE_FALLBACK_S * SLOW, "wake-ups after a lost message: %s" % lat
        # with the subscribers back, a wake-up is a message again: fast
        fx.wait_until(lambda: len(r.clients("pubsub")) >= 1, 10, "the subscribers to return")
        holder = grant(a, "ps", ttl_ms=60000)
        p = Parked(b, "ps", {"owner": "after"})
        fx.wait_until(lambda: waiting(a, "ps") == 1, 10, "park")
        wakes = fx.metric(b, "semad_redis_wakeups_total")
        t0 = time.monotonic()
        release(a, holder)
        st, lease = p.wait(10)
        assert st == 200, (st, lease)
        # a message again: b counts it (waited for: a heartbeat may have collected the grant
        # first). The time alone cannot tell the two: the heartbeat's fallback comes every 1.6
        # to 2 s, so at any time after the release.
        fx.wait_until(lambda: fx.metric(b, "semad_redis_wakeups_total") > wakes, 5,
                      "b's wake-up message")
        print("woken %.3f s after the release" % (p.t_recv - t0))
        release(b, lease)
        print("wake-ups after a lost message: %s s" % ["%.3f" % x for x in lat])


# ---- CLIENT PAUSE ----

def test_client_pause():
    """Redis answers nobody for a while: requests wait and are answered (a short pause), or
    get 503 within the bound (a pause past the command timeout) — never an over-admission,
    never a waiter lost; parked waiters are granted once Redis answers again."""
    r, fl = redis_fleet(2)
    with r, fl:
        a, b = fl[0], fl[1]
        put(a, "cp", 1)
        sems = {"p1": 1, "p2": 2}
        load = load_over(fl, sems, threads=10, unavailable_ok=True,
                         answer_slack_s=UNREACHABLE_BOUND_S + 3.5)
        for pause_ms in (1500, 3500):
            holder = grant(a, "cp", ttl_ms=60000)
            p = Parked(b, "cp", {"owner": "w%d" % pause_ms})
            fx.wait_until(lambda: waiting(a, "cp") == 1, 10, "park")
            time.sleep(0.3)
            r.pause(pause_ms)
            t0 = time.monotonic()
            rel = {}
            t = threading.Thread(target=lambda: rel.setdefault(
                "r", a.request("DELETE", "/v1/leases/" + holder["lease"], timeout=60)))
            t.start()
            t.join(pause_ms / 1000 + UNREACHABLE_BOUND_S + 5 * SLOW)
            assert not t.is_alive(), "a release during CLIENT PAUSE was never answered"
            st = rel["r"][0]
            assert st in (204, 503), rel["r"]
            if st == 503:  # unknown outcome: once Redis answers, the lease is gone or not
                fx.wait_until(lambda: a.request("DELETE", "/v1/leases/" + holder["lease"])[0]
                              in (204, 410), 15, "the release to go through after the pause")
            res = p.wait(pause_ms / 1000 + UNREACHABLE_BOUND_S + WAKE_FALLBACK_S + 5)
            assert res[0] == 200, ("the parked waiter after a %d ms pause" % pause_ms, res)
            print("pause %d ms: release answered %d, waiter granted %.2fs after the pause "
                  "began" % (pause_ms, st, p.t_recv - t0))
            release(a, res[1])
            p.close()
        time.sleep(1.0)
        t1 = time.monotonic()
        load.stop()
        summary = load.check(min_grants=10, expect_contention=False)
        t2 = time.monotonic()
        # what a 503 left unknown is settled once Redis answers: well before the ttls (20 s)
        sc.wait_rest(fl.live(), dict(sems, cp=1), timeout=8, load=load)
        print("load stopped in %.2fs, at rest %.2fs later; %s" % (t2 - t1, time.monotonic() - t2,
                                                                  summary))


def test_grant_in_a_sweep_whose_answer_was_lost():
    """A lease expires while Redis is stopped: the sweep that grants the parked waiter its
    units runs when Redis resumes, on a connection semad dropped (the command timed out), so
    its answer never comes. The waiter still gets that lease once the connection is back (its
    lease id finds it), not a 503 beside a permit held by nobody until its ttl."""
    rf.need_redis_engine()
    r = rf.RedisServer()
    with r, rf.Fleet(r.url() + "?timeout=300", 1) as fl:
        a = fl[0]
        put(a, "sw", 1)
        ttl_s = 1.5
        t_grant = time.monotonic()
        holder = grant(a, "sw", ttl_ms=int(ttl_s * 1000))
        p = Parked(a, "sw", {"ttl_ms": 60000, "timeout_ms": 30000})
        fx.wait_until(lambda: waiting(a, "sw") == 1, 10, "park")
        timeouts = fx.metric(a, "semad_redis_command_timeouts_total")
        # stopped just before the expiry: the sweep goes out on a connection that times out
        # (no heartbeat can time out first, the gap being shorter than the command timeout)
        time.sleep(max(0.0, t_grant + ttl_s - 0.15 - time.monotonic()))
        os.kill(r.proc.pid, signal.SIGSTOP)
        try:
            fx.wait_until(lambda: fx.metric(a, "semad_redis_command_timeouts_total") > timeouts
                          and time.monotonic() > t_grant + ttl_s + 0.1, 10,
                          "the sweep to time out")
        finally:
            os.kill(r.proc.pid, signal.SIGCONT)
        st, lease = p.wait(10)
        assert st == 200, ("the waiter granted in the lost sweep", st, lease, holder)
        assert fx.metric(a, "semad_redis_waiters_lost_total") == 0
        v = view(a, "sw")
        assert v["held"] == 1 and v["waiting"] == 0, v
        release(a, lease)
        fx.wait_until(lambda: view(a, "sw")["available"] == 1, 5, "the units back")
        p.close()


# ---- Redis unreachable ----

def test_store_unavailable_says_when_to_ask_again():
    """With Redis away, semad's 503 store_unavailable carries Retry-After: 1 on the v1 API
    (a read and a release) and on the legacy one, which is what the clients wait out between
    their retries; other replies carry none."""
    r, fl = redis_fleet(1, aof=True)
    with r, fl:
        s = fl[0]
        put(s, "ra", 1)
        lease = grant(s, "ra")
        st, hd, _ = s.request("GET", "/v1/semaphores/no-such-one")
        assert st == 404 and "retry-after" not in hd, (st, hd)
        r.kill()
        for method, path in (("GET", "/v1/semaphores/ra"),
                             ("DELETE", "/v1/leases/" + lease["lease"])):
            st, hd, data = s.request(method, path, timeout=60)
            doc = json.loads(data)
            assert st == 503 and doc.get("code") == "store_unavailable", (method, st, doc)
            assert hd.get("retry-after") == "1", (method, path, hd)
        st, hd, data = s.request("GET", "/semaphore/value/ra", timeout=60)
        assert st == 503 and hd.get("retry-after") == "1", (st, hd, data)
        r.start()
        fx.wait_until(lambda: s.request("GET", "/v1/semaphores/ra")[0] == 200, 20,
                      "the instance to reconnect")
        release(s, lease)


# ---- Redis restarted ----

def test_redis_restart_with_aof_always():
    """kill -9 of Redis with `appendfsync always`, down for 3 s (longer than semad's command
    timeout, so the instances' heartbeats fail meanwhile), started again on its AOF:
    requests meanwhile get 503 within the bound; afterwards every acknowledged lease is
    there with its fence, an acknowledged release stays released, the parked waiter is still
    queued and is granted, and new fences are larger than every fence handed out before."""
    r, fl = redis_fleet(2, aof=True, durability="strict")
    with r, fl:
        a, b = fl[0], fl[1]
        put(a, "ao", 3)
        l1 = grant(a, "ao", weight=2, ttl_ms=60000)
        l2 = grant(b, "ao", weight=1, ttl_ms=60000)
        release(a, l2)
        w = Parked(b, "ao", {"weight": 2, "owner": "parked", "ttl_ms": 60000})
        fx.wait_until(lambda: waiting(a, "ao") == 1, 10, "park")
        top = max(l1["fence"], l2["fence"])
        r.kill()
        t0 = time.monotonic()
        st, body = a.json("GET", "/v1/semaphores/ao", timeout=60)
        took = time.monotonic() - t0
        assert st == 503 and body.get("code"), (st, body)
        assert took < UNREACHABLE_BOUND_S * SLOW, "503 after %.2fs with Redis down" % took
        time.sleep(max(0.0, 3.0 - (time.monotonic() - t0)))
        r.start()
        fx.wait_until(lambda: all(s.request("GET", "/v1/semaphores/ao")[0] == 200
                                  for s in fl.live()), 20, "the instances to reconnect")
        st, got = b.json("GET", "/v1/leases/" + l1["lease"])
        assert st == 200 and got["fence"] == l1["fence"] and got["weight"] == 2, (st, got)
        st, body = a.json("GET", "/v1/leases/" + l2["lease"])
        assert st == 410, ("an acknowledged release came back", st, body)
        v = view(a, "ao")
        assert v["held"] == 2 and v["waiting"] == 1 and not w.done.is_set(), (
            "the parked waiter's record did not survive the restart", v, w.result,
            fl.log()[-20:])
        release(b, l1)
        st, lw = w.wait(WAKE_FALLBACK_S + 10)
        assert st == 200 and lw["fence"] > top, (st, lw, top)
        l3 = grant(a, "ao", weight=1)
        assert l3["fence"] > lw["fence"], ("a fence handed out again", l3, lw)
        release(a, lw)
        release(b, l3)
        w.close()


def test_redis_restart_without_persistence():
    """Redis restarted empty under running instances: they notice (the epoch is gone), answer
    the parked waiter 503 instead of queueing it again, and refuse grants until every lease
    handed out before could have expired (--max-ttl): the holder Redis forgot still holds
    its unit, so no one else may get it before its ttl — no over-admission. Then they serve
    again."""
    max_ttl = 3000
    r, fl = redis_fleet(2, "--max-ttl", "%dms" % max_ttl, "--default-ttl", "1s")
    with r, fl:
        a, b = fl[0], fl[1]
        put(a, "np", 1)
        t_sent = time.monotonic()
        old = grant(a, "np", ttl_ms=max_ttl, owner="forgotten")
        w = Parked(b, "np", {"owner": "parked"})
        fx.wait_until(lambda: waiting(a, "np") == 1, 10, "park")
        r.restart()
        t_restart = time.monotonic()
        res = w.wait(UNREACHABLE_BOUND_S + WAKE_FALLBACK_S + 5)
        assert is_problem(res, 503), ("the waiter whose record Redis lost", res)
        # Clients keep trying: re-create the semaphore, try to acquire, on both instances.
        first_grant, answers = None, {}
        deadline = time.monotonic() + (max_ttl / 1000 + 15) * SLOW
        i = 0
        while first_grant is None and time.monotonic() < deadline:
            s = fl[i % 2]
            i += 1
            st = s.request("PUT", "/v1/semaphores/np", {"capacity": 1})[0]
            answers[("put", st)] = answers.get(("put", st), 0) + 1
            t_send = time.monotonic()
            st, body = acquire(s, "np", timeout_ms=0, ttl_ms=1000)
            answers[("acquire", st)] = answers.get(("acquire", st), 0) + 1
            assert st in (200, 404, 409, 503), (st, body)
            if st == 200:
                first_grant = (t_send, body)
                break
            time.sleep(0.05)
        assert first_grant is not None, ("no grant after the safe time", answers)
        assert first_grant[0] >= t_sent + max_ttl / 1000 - 0.1, (
            "granted %.2fs after the restart, before the forgotten lease's ttl ran out: "
            "over-admission" % (first_grant[0] - t_restart), answers)
        # the forgotten lease: its release finds nothing, and says so
        st, body = a.json("DELETE", "/v1/leases/" + old["lease"])
        assert st in (404, 410) and body.get("code"), (st, body)
        release(b, first_grant[1])
        w.close()
        print("first grant %.2fs after the restart; answers %s"
              % (first_grant[0] - t_restart, answers))


def test_a_short_grant_past_the_horizon_holds_the_pause_after_lost_data():
    """An uncontended acquire whose lease ends past the horizon (the latest expiry Redis keeps,
    a second past the last general path's lease) moves it itself, and its short answer does
    not say so: the instance counts the lease in the horizon it tells at its hello all the
    same. Redis restarted empty, it grants nothing until that lease could have ended (not only
    until the horizon its last general answer told, 2.5 s here, short of --max-ttl)."""
    r, fl = redis_fleet(1, "--max-ttl", "8s")
    with r, fl:
        a = fl[0]
        put(a, "hz", 1)
        release(a, grant(a, "hz", ttl_ms=1500))  # the general path: the row gets a due time
        t_sent = time.monotonic()
        held = grant(a, "hz", ttl_ms=4000)  # the short path, past the horizon
        horizon = int(r.cli("HGET", "sema:epoch", "horizon"))
        assert horizon >= held["expires_at"], ("the horizon behind a lease", horizon, held)
        r.restart()
        first, answers = None, {}
        deadline = time.monotonic() + 20 * SLOW
        while first is None and time.monotonic() < deadline:
            put(a, "hz", 1)
            st, body = acquire(a, "hz", timeout_ms=0, ttl_ms=1000)
            answers[st] = answers.get(st, 0) + 1
            assert st in (200, 503), (st, body)
            if st == 200:
                first = time.monotonic()
            else:
                time.sleep(0.05)
        assert first is not None, ("no grant after the pause", answers)
        assert first >= t_sent + 4.0, ("granted %.2fs after the lease the short path gave, "
                                       "before its ttl ran out" % (first - t_sent), answers)
        print("first grant %.2fs after the 4 s lease; answers %s" % (first - t_sent, answers))


# ---- a release that WAIT did not confirm, and a failover ----

def release_unconfirmed(s, replica, name, ttl_ms):
    """A lease on a new semaphore `name`, released after `replica`, the primary's one replica,
    left it (REPLICAOF NO ONE: it keeps the lease and takes nothing more): the release is
    answered 503, the outcome unknown."""
    put(s, name, 1)
    lease = grant(s, name, ttl_ms=ttl_ms)
    replica.cli("REPLICAOF", "NO", "ONE")
    st, body = s.json("DELETE", "/v1/leases/" + lease["lease"])
    assert st == 503 and "outcome is unknown" in json.dumps(body), (st, body)
    return lease


def test_unconfirmed_release_is_carried_to_the_promoted_replica():
    """--durability strict with ?replicas=1: a release whose WAIT comes back short is
    answered 503, the outcome unknown. Here the replica had left before it (so it never got
    the release), then the primary dies and that replica is promoted. semad sends the release
    again until a WAIT confirms it, so the promoted replica ends the lease too: its unit comes
    back at once, not after the lease's 60 s ttl."""
    rf.need_redis_engine()
    primary = rf.RedisServer(name="primary")
    replica = rf.RedisServer(replicaof=primary.port, name="replica")
    relay = fx.Relay()  # semad's one Redis address: the primary's, then the promoted replica's
    relay.target = ("127.0.0.1", primary.port)
    fl = reader = None
    try:
        rf.wait_until(lambda: replica.info("replication").get("master_link_status") == "up", 15,
                      "the replica to follow the primary")
        fl = rf.Fleet("redis://127.0.0.1:%d?replicas=1" % relay.port, 1, durability="strict")
        # strict with ?replicas=1 answers 503 on a primary without replicas, reads too: a
        # relaxed instance on the same Redis reads what it holds
        reader = rf.Fleet("redis://127.0.0.1:%d" % relay.port, 1, durability="relaxed")
        s = fl[0]
        release_unconfirmed(s, replica, "carry", 60000)
        assert view(reader[0], "carry")["held"] == 0  # the primary ran the release
        primary.kill()  # from here on, whatever the reader reads comes from the replica
        relay.target = ("127.0.0.1", replica.port)
        t0 = time.monotonic()
        rf.wait_until(lambda: view(reader[0], "carry")["held"] == 0, 15,
                      "the release to reach the promoted replica")
        print("the unit came back %.2f s after the promotion" % (time.monotonic() - t0))
    finally:
        for f in (fl, reader):
            if f is not None:
                f.close(check=False)
        relay.close()
        replica.close()
        primary.close()


def resp_end(buf, i=0):
    """The end of the RESP2 value at buf[i:], or None while it is incomplete."""
    j = buf.find(b"\r\n", i)
    if j < 0:
        return None
    kind, n = buf[i:i + 1], buf[i + 1:j]
    if kind in (b"+", b"-", b":"):
        return j + 2
    if kind == b"$":
        n = int(n)
        return j + 2 if n < 0 else (j + 4 + n if len(buf) >= j + 4 + n else None)
    if kind == b"*":
        j += 2
        for _ in range(max(int(n), 0)):
            j = resp_end(buf, j)
            if j is None:
                return None
        return j
    raise ValueError("not RESP2: %r" % buf[i:i + 20])


class DemotingRelay(fx.Relay):
    """A relay to Redis that, once armed, plays a primary demoted mid-batch: the reply to the
    first command carrying `marker` goes to semad in one piece with a READONLY error in place
    of the next command's reply, as a primary that Sentinel demotes right after a write
    answers; from then on new connections go to `then`."""

    def arm(self, marker, then):
        self.marker, self.then, self.injected = marker, then, threading.Event()

    def _join(self, c, u):
        st = {"sent": 0, "mark": None}
        threading.Thread(target=self._up, args=(c, u, st), daemon=True).start()
        threading.Thread(target=self._down, args=(u, c, st), daemon=True).start()

    def _up(self, c, u, st):
        """semad to Redis: counts the commands, and notes the one that carries the marker."""
        buf = b""
        try:
            while True:
                data = c.recv(65536)
                if not data:
                    break
                buf += data
                while (end := resp_end(buf)) is not None:
                    if (st["mark"] is None and getattr(self, "marker", None)
                            and self.marker in buf[:end]):
                        st["mark"] = st["sent"]
                    st["sent"] += 1
                    buf = buf[end:]
                u.sendall(data)
        except OSError:
            pass
        for sock in (u, c):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _down(self, u, c, st):
        """Redis to semad, a reply at a time; the marked reply waits for the next one."""
        buf, n, held = b"", 0, None
        try:
            while True:
                data = u.recv(65536)
                if not data:
                    break
                buf += data
                while (end := resp_end(buf)) is not None:
                    reply, buf = buf[:end], buf[end:]
                    if held is not None:  # the next command's: a demoted primary's answer
                        self.target = self.then
                        c.sendall(held + b"-READONLY You can't write against a read only "
                                  b"replica.\r\n")
                        self.injected.set()
                        u.close()
                        return
                    if st["mark"] is not None and n == st["mark"] and not self.injected.is_set():
                        held = reply
                    else:
                        c.sendall(reply)
                    n += 1
        except OSError:
            pass
        try:
            c.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def test_undo_left_unconfirmed_is_kept_no_longer_than_the_longest_ttl():
    """--durability strict with ?replicas=1 and a replica that never comes back: a release
    answered 503 (the outcome unknown) is sent again until a WAIT confirms it, but not past
    the longest ttl (--max-ttl) and a second, when whatever it ends has expired on every
    replica anyway: what semad keeps for Redis stays bounded while the replicas stay away."""
    rf.need_redis_engine()
    primary = rf.RedisServer(name="primary")
    replica = rf.RedisServer(replicaof=primary.port, name="replica")
    fl = None
    try:
        rf.wait_until(lambda: replica.info("replication").get("master_link_status") == "up", 15,
                      "the replica to follow the primary")
        fl = rf.Fleet("redis://127.0.0.1:%d?replicas=1" % primary.port, 1, "--max-ttl", "3s",
                      "--default-ttl", "3s",
                      durability="strict")
        s = fl[0]
        release_unconfirmed(s, replica, "gone", 3000)

        def undo():
            m = [line for line in fx.metrics_text(s).splitlines()
                 if line.startswith("semad_redis_undo_pending ")]
            return int(float(m[0].split()[1])) if m else None

        assert undo() is not None, "no semad_redis_undo_pending in /metrics"
        assert undo() >= 1, undo()  # sent again, each time a WAIT comes back short
        t0 = time.monotonic()
        rf.wait_until(lambda: undo() == 0, 10, "the release sent again to be let go")
        took = time.monotonic() - t0
        print("let go %.2f s after its 503 (max ttl 3 s)" % took)
        assert took >= 2.0, "let go before the longest ttl: %.2f s" % took
        # the log said once that WAIT came back short (however many did), and says once
        # that it is whole again when the replica is back
        short = "WAIT confirmed writes on 0 of the 1 replicas asked for"
        assert len([ln for ln in s.log() if short in ln]) == 1, s.log()
        replica.cli("REPLICAOF", "127.0.0.1", str(primary.port))
        rf.wait_until(lambda: replica.info("replication").get("master_link_status") == "up", 15,
                      "the replica to follow the primary again")
        rf.wait_until(lambda: acquire(s, "gone", ttl_ms=500)[0] == 200, 10, "a grant confirmed")
        rf.wait_until(lambda: [ln for ln in s.log() if "WAIT confirms writes on the 1 replicas "
                               "asked for again, after " in ln], 5, "the log of WAIT whole again")
    finally:
        if fl is not None:
            fl.close(check=False)
        replica.close()
        primary.close()


def demoted_after(write):
    """--durability strict with ?replicas=1: the reply to a write (`release` or `grant`), then
    a READONLY for the next command in the same read: the primary was demoted just after it
    ran the write, and the replica promoted next never got it. semad drops the connection
    before it could send the write's WAIT; a WAIT on the next primary counts that primary's
    replicas, not the old one's, so it must not confirm the write: semad answers it 503
    (outcome unknown) and settles it on the next primary (a release is sent again, a grant
    is undone), so the unit is free there, and never held twice."""
    rf.need_redis_engine()
    primary = rf.RedisServer(name="primary")
    nxt = rf.RedisServer(replicaof=primary.port, name="next")
    below = rf.RedisServer(replicaof=nxt.port, name="below")  # the next primary's replica
    relay = DemotingRelay()
    relay.target = ("127.0.0.1", primary.port)
    fl = None
    try:
        for r in (nxt, below):
            rf.wait_until(lambda r=r: r.info("replication").get("master_link_status") == "up",
                          15, "the replicas to follow")
        fl = rf.Fleet("redis://127.0.0.1:%d?replicas=1" % relay.port, 1, durability="strict")
        s = fl[0]
        put(s, "carry", 1)
        put(s, "other", 1)
        out = {}
        if write == "release":
            lease = grant(s, "carry", ttl_ms=60000)
            nxt.cli("REPLICAOF", "NO", "ONE")  # it keeps the lease and takes nothing more
            relay.arm(lease["lease"].encode(), ("127.0.0.1", nxt.port))

            def run():
                out["res"] = s.json("DELETE", "/v1/leases/" + lease["lease"])
        else:
            nxt.cli("REPLICAOF", "NO", "ONE")  # it never gets the grant
            relay.arm(b"marked-holder", ("127.0.0.1", nxt.port))

            def run():
                out["res"] = acquire(s, "carry", timeout_ms=0, ttl_ms=60000,
                                     owner="marked-holder")

        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.2)  # the next command, while the write's reply waits at the relay
        other = acquire(s, "other", timeout_ms=0, ttl_ms=60000)
        t.join(30)
        assert relay.injected.is_set(), "the relay never saw the write and a command after it"
        st, body = out["res"]
        print("%s answered %d; the next command answered %d" % (write, st, other[0]))
        # before the fix: answered as done (204, 200), confirmed by a WAIT on the next
        # primary, which keeps the released lease for its ttl (60 s), or never had the grant
        # (whose units it would then grant again)
        assert st == 503 and "outcome is unknown" in json.dumps(body), (st, body)
        t0 = time.monotonic()
        rf.wait_until(lambda: view(s, "carry")["held"] == 0, 15,
                      "the unit free on the next primary")
        print("the unit is free %.2f s after the answer" % (time.monotonic() - t0))
    finally:
        if fl is not None:
            fl.close(check=False)
        relay.close()
        for r in (below, nxt, primary):
            r.close()


def test_release_held_when_the_primary_is_demoted_is_not_confirmed_by_the_next():
    demoted_after("release")


def test_grant_held_when_the_primary_is_demoted_is_not_confirmed_by_the_next():
    demoted_after("grant")


# ---- Sentinel failover ----

def longest_without_grants(load, t0, more=()):
    """The longest time without a grant answered (the load's, and `more`), from a second
    before t0 (a failover's start) to the last grant."""
    with load.lock:
        times = sorted([g["recv"] for g in load.grants if g["recv"] >= t0 - 1.0] + list(more))
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)

# the pause when nothing proves the new primary has every acknowledged write: the longest
# lease (the load's) within --max-ttl
PAUSE_TTL_S, PAUSE_MAX_TTL_S = 6, 8


def sentinel_failover(crash, replicas=1, wait=1):
    """Under load through three instances, --durability strict with ?replicas=`wait`, on a
    primary with `replicas` replicas. With `wait` covering every replica, what was
    acknowledged survives (every replica had it, whichever Sentinel promotes), so grants resume
    as soon as the new primary has the replicas WAIT asks for: once the crashed node rejoins as
    a replica (within Sentinel's switch, the rejoin and a second), once the old primary is
    demoted after a graceful failover. With fewer, the replica promoted may lack what the
    others confirmed: grants pause until every lease granted before has run out (the load's
    PAUSE_TTL_S, within --max-ttl PAUSE_MAX_TTL_S), and the instances say why."""
    rf.need_redis_engine()
    if "thread" in os.environ.get("SEMA_SANITIZE", ""):
        # ThreadSanitizer slows semad and the load many times over, past the failover's
        # bounds; the normal and ASan builds run it (semad's Redis code is one thread)
        print("skipped under ThreadSanitizer")
        sys.exit(77)
    proven = wait >= replicas
    ttl_ms = 20000 if proven else PAUSE_TTL_S * 1000
    args = () if proven else ("--max-ttl", "%ds" % PAUSE_MAX_TTL_S)
    # strict, each reply held until WAIT says `wait` replicas have it
    with rf.Sentinels(replicas=replicas) as sn, \
            rf.Fleet(sn.url() + "?replicas=%d" % wait, 3, *args, durability="strict") as fl:
        a, b = fl[0], fl[1]
        sems = {"f1": 1, "f3": 3}
        put(a, "fo", 1)
        put(a, "probe", 1)
        held = grant(a, "fo", ttl_ms=60000 if proven else ttl_ms)
        w = Parked(b, "fo", {"owner": "across"})
        fx.wait_until(lambda: waiting(a, "fo") == 1, 10, "park")
        # Unproven, the promoted replica may lack a lease granted (and acknowledged) just
        # before the failover: its holder's renew or release is answered 404, rightly (the
        # pause covers the lease's ttl, and the checker counts it held until then). A busy
        # machine makes that window wider, not the answer wrong.
        load = load_over(fl, sems, threads=10, unavailable_ok=True, ttl_ms=ttl_ms,
                         answer_slack_s=UNREACHABLE_BOUND_S + 10, gone_ok=not proven)
        time.sleep(1.5)
        before = len(load.grants)
        t0 = time.monotonic()
        new = sn.crash_primary() if crash else sn.failover()
        switched = sn.switched_at - t0
        rejoined = time.monotonic() - t0  # (after a crash: the crashed node is a replica)
        # the instances follow: grants again through each of them, once the new primary
        # has the replica that strict durability waits for (after a graceful failover the
        # sentinels demote the old primary about 10 s later; after a crash, the crashed
        # node rejoins as a replica)

        last, refused = {}, []

        def grants_everywhere():
            for i, s in enumerate(fl.live()):
                st, lease = acquire(s, "probe", timeout_ms=0, ttl_ms=5000)
                last[i] = (st, lease)
                if st != 200:
                    # what each instance answered while it did not grant (for the message below)
                    refused[:] = refused[-9:] + [(round(time.monotonic() - t0, 2), i, st, lease)]
                    return False
                rst, _, rbody = s.request("DELETE", "/v1/leases/" + lease["lease"])
                if rst != 204:
                    refused[:] = refused[-9:] + [(round(time.monotonic() - t0, 2), i, "release",
                                                  rst, rbody)]
            return True
        try:
            fx.wait_until(grants_everywhere, 40, "grants through every instance again")
        except AssertionError:
            # Should the instances ever reach a node without the data (before the fixture
            # brought the crashed node back as a replica, it came back an empty primary at
            # the old address for ~10 s, and they did): every instance must say so and hold
            # its grants for a max ttl, never grant from the empty state.
            lost = [v for v in last.values()
                    if v[0] == 503 and v[1].get("code") == "unavailable_retry"
                    and "lost its state" in v[1].get("detail", "")]
            assert last and len(lost) == len(last), ("no grant after the failover", last)
            load.stop()
            # Reads went to the empty node too: until an instance notices the loss (its next
            # script call finds the epoch gone) a semaphore reads as not found. What is
            # checked is that nothing was granted from the empty state.
            with load.lock:
                load.errors = [e for e in load.errors
                               if not (e.startswith("monitor: GET ") and " answered 404 " in e)]
            summary = load.check(min_grants=1, expect_contention=False)
            w.close()
            print("the promoted node lacked the data: every instance holds its grants (%s)"
                  % summary)
            return
        followed = time.monotonic() - t0
        # each instance warns that it saw the failover (docs/redis.md, Health and logs)
        for i, s in enumerate(fl.live()):
            assert [ln for ln in s.log() if " warn: redis: " in ln and (
                "Sentinel switched the primary" in ln or " the primary of " in ln)], (
                "instance %d did not log the failover" % i, s.log()[-10:])

        def grants_after():
            with load.lock:
                return len([g for g in load.grants if g["send"] > t0 + followed])

        # the load is granted again at once, unless every unit is held by leases whose
        # release was answered "Redis is unreachable" while no primary was there: never sent,
        # they hold until their ttl (20 s; the client was told, and could send it again). A
        # release answered "the outcome is unknown" was sent, and semad settles it once it
        # reaches the new primary: such a holder must not be left.
        time.sleep(2.0)
        if grants_after() == 0:
            views = {n: a.json("GET", "/v1/semaphores/" + n)[1] for n in sems}
            said = [load.said.get(h.get("owner"), "") for v in views.values()
                    for h in (v or {}).get("holders", [])]
            unsettled = [x for x in said if "release: 204" in x or
                         ("release: 503" in x and "outcome is unknown" in x)]
            # (without the proof, a release WAIT confirmed may be lost: its lease holds until
            # its ttl, which the pause covered; the load then queues behind it)
            assert not unsettled or not proven, ("no grant after the failover", unsettled,
                                                 sc.describe(fl[0], sems, load))
            print("no grant 2 s after the failover: the units are held by %s" % said)
            fx.wait_until(lambda: grants_after() > 0, 25, "a grant of the load after the failover")
        load.stop()
        summary = load.check(min_grants=1, expect_contention=False)
        after = grants_after()
        gap = longest_without_grants(load, t0)
        print("figure redis_failover %s replicas=%d wait=%d no_grant_s=%.2f switched_s=%.2f"
              " rejoined_s=%.2f grants_everywhere_s=%.2f" % (
                  "kill9" if crash else "sentinel_failover", replicas, wait, gap, switched,
                  rejoined if crash else 0.0, followed))
        # on a loaded machine the sentinels (down-after 1 s) may fail over a second time, from
        # the node just promoted while it forks for the rejoining node's copy: WAIT then lacks a
        # replica until they demote that node, and the bound for one failover does not apply
        again = sn.master_port() != new.port or any(
            len([ln for ln in s.log() if "Sentinel switched the primary" in ln]) > 1
            for s in fl.live())
        if again:
            print("the sentinels failed over a second time before grants came back everywhere")
        if proven and crash and not again:
            # nothing waits but the switch and the rejoin that gives WAIT its replicas: every
            # instance grants again within a second of it (the load's own gap adds its
            # clients' pause after a 503, up to a second). The figure is the printed line; the
            # bound is two seconds, far below the pause for the longest lease (6 s here) it
            # tells apart, so that a busy machine's scheduling does not fail it (3.32 s for a
            # rejoin at 2.29 s was seen at load 8)
            assert followed <= rejoined + 2.0 * SLOW, (
                "no grant through every instance %.2fs after the kill; the switch took %.2fs, "
                "the rejoin %.2fs; the last answers that were not grants: %s; the instances "
                "said: %s" % (followed, switched, rejoined, refused,
                              [[ln for ln in s.log() if " warn: " in ln][-6:]
                               for s in fl.live()]))
        if not proven:
            # every instance paused until the leases granted before may have run out (the
            # load's last ones, granted up to the failover), and said why. Grants came back
            # through every instance (`followed`) once the pause ended; the load's own gap can
            # be longer: a waiter answered on the old primary after the switch (a write the
            # promoted replica lacks) is still queued on the new one, and a grant made for it
            # holds its units until its ttl. A second failover pauses again from its own
            # switch, whose time the test does not see: then only the lower bound holds
            assert PAUSE_TTL_S - 1.0 <= followed and (
                again or followed <= switched + PAUSE_MAX_TTL_S + 2.0 * SLOW), (
                "grants everywhere %.2fs after the %s (switched in %.2fs); the pause is %d s" % (
                    followed, "kill" if crash else "failover", switched, PAUSE_TTL_S))
            for i, s in enumerate(fl.live()):
                assert [ln for ln in s.log() if " warn: redis: " in ln and
                        "while WAIT asked for %d" % wait in ln], (
                    "instance %d did not say why grants paused" % i, s.log()[-10:])
        assert after > 0, ("no grant after the failover", summary,
                           sc.describe(fl[0], sems, load))
        # a release answered 503 had its WAIT unmet (with replicas=2, until the crashed node
        # is back as a replica): the outcome is unknown, and a client sends it again
        def released():
            st = a.request("DELETE", "/v1/leases/" + held["lease"])[0]
            assert st in (204, 404, 410, 503), st
            return st != 503
        fx.wait_until(released, timeout=15, what="the held lease's release answered")
        res = w.wait(WAKE_FALLBACK_S + 15)
        assert res[0] in (200, 503), res  # granted, or its record lost with the failover
        if res[0] == 200:
            b.request("DELETE", "/v1/leases/" + res[1]["lease"])
        # what the failover left unknown is settled: a grant whose WAIT failed is undone, and a
        # release whose WAIT failed (answered 503, the outcome unknown) is sent again, once the
        # instances reach the new primary (the bound keeps the load's 20 s ttl as a margin)
        # (without the proof, also the waiters answered on the old primary after the switch
        # that are still queued on the new one: each grant made for one holds its units for
        # its ttl, PAUSE_TTL_S, one after another, docs/performance-redis.md)
        sc.wait_rest(fl.live(), sems, timeout=25 if proven else 60, load=load)
        w.close()
        print("switched in %.2fs, followed in %.2fs; %d grants before, %d after; %s"
              % (switched, followed, before, after, summary))
        # the sentinels still name one of the two nodes; on a slow machine (a sanitizer build)
        # they may have failed over a second time meanwhile, which the checks above covered
        now = sn.master_port()
        assert now in [n.port for n in sn.nodes()], now
        if now != new.port:
            print("the sentinels failed over a second time (now %d)" % now)


def test_sentinel_failover_graceful():
    """SENTINEL FAILOVER under load through three instances (--durability strict with
    ?replicas=1, one replica): they follow the new primary, never over-admit (even while the
    old primary still takes writes), fences keep increasing, the parked waiter is granted or
    told 503, and what the failover left unknown is settled; grants resume once the old
    primary, demoted, follows the new one (about 10 s: a second replica would not shorten it
    safely, docs/durability.md)."""
    sentinel_failover(crash=False)


def test_sentinel_failover_crash():
    """kill -9 of the primary under load: the sentinels promote the replica; the same
    checks, and grants resume within the switch, the crashed node's rejoin and a second."""
    sentinel_failover(crash=True)


def test_sentinel_failover_crash_two_replicas():
    """kill -9 of the primary with two replicas and ?replicas=2: every acknowledged write was
    on both, so grants resume within the switch, the rejoin and a second."""
    sentinel_failover(crash=True, replicas=2, wait=2)


def test_sentinel_failover_crash_two_replicas_wait_one():
    """kill -9 of the primary with two replicas and ?replicas=1: the replica promoted need
    not be the one WAIT counted, so grants pause for the longest lease; no over-admission."""
    sentinel_failover(crash=True, replicas=2, wait=1)


def test_sentinel_failover_graceful_two_replicas():
    """SENTINEL FAILOVER with two replicas and ?replicas=2: the promoted replica stops
    confirming, so nothing acknowledged is lost and no pause is needed; grants wait only for
    WAIT's second replica, the old primary, which Sentinel demotes about 10 s later."""
    sentinel_failover(crash=False, replicas=2, wait=2)


def test_sentinel_failover_graceful_two_replicas_wait_one():
    """SENTINEL FAILOVER with two replicas and ?replicas=1: the replica that confirmed writes
    to WAIT need not be the one promoted (it resyncs from the new primary and drops them), so
    grants pause for the longest lease; no over-admission, no fence twice."""
    sentinel_failover(crash=False, replicas=2, wait=1)


def test_silent_sentinels_are_passed_over():
    """Sentinels that accept no connection or answer nothing, before three that work: a
    listening socket whose backlog is full (the connect itself never completes), then the
    first Sentinel, SIGSTOPped before semad starts (the kernel still accepts connections to
    it). Past the command timeout (?timeout=500) each is dropped with a warning naming it and
    what it did not answer, and semad is ready through the second Sentinel within those two
    timeouts and their backoffs (at most 3 s in all, here)."""
    rf.need_redis_engine()
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)  # one connection waits in its backlog: the next ones' SYNs are dropped
    filler = socket.create_connection(full.getsockname(), timeout=10)
    with rf.Sentinels() as sn, full, filler:
        first = sn.sentinels[0][1]
        os.kill(first.pid, signal.SIGSTOP)
        try:
            url = "redis+sentinel://127.0.0.1:%d,%s?timeout=500" % (
                full.getsockname()[1], sn.url()[len("redis+sentinel://"):])
            t0 = time.monotonic()
            with rf.Fleet(url, 1) as fl:  # (returns once healthy)
                took = time.monotonic() - t0
                s = fl[0]
                ready = "engine redis %s via Sentinels" % rf.MASTER
                fx.wait_until(lambda: [ln for ln in s.log() if " ready (" in ln and ready in ln],
                              5, "the ready line")
                for said in ("Sentinel 127.0.0.1:%d did not answer the connect" %
                             full.getsockname()[1],
                             "Sentinel 127.0.0.1:%d did not answer SENTINEL "
                             "get-master-addr-by-name" % sn.ports()[0]):
                    fx.wait_until(lambda: [ln for ln in s.log() if said in ln], 5, said)
                assert took <= (2 * 0.5 + 3.0 + 1.0) * SLOW, took
                put(s, "q", 1)
                assert acquire(s, "q")[0] == 200
                print("ready %.2fs after start, past two silent Sentinels" % took)
        finally:
            os.kill(first.pid, signal.SIGCONT)


def test_sentinel_failover_relaxed_pauses_grants_for_the_longest_lease():
    """--durability relaxed: nothing proves the promoted replica has every acknowledged grant
    (replication is asynchronous), so after kill -9 of the primary the instances grant
    nothing (503 "lost its state") until every lease granted before may have expired (the
    latest expiry any instance heard of, at most --max-ttl), then grant again; no
    over-admission meanwhile."""
    rf.need_redis_engine()
    if "thread" in os.environ.get("SEMA_SANITIZE", ""):
        print("skipped under ThreadSanitizer")
        sys.exit(77)
    max_ttl_s = 6
    with rf.Sentinels() as sn, rf.Fleet(sn.url(), 2, "--max-ttl", "%ds" % max_ttl_s,
                                        "--default-ttl", "2s") as fl:
        a = fl[0]
        sems = {"r1": 1, "r3": 3}
        put(a, "probe", 1)
        load = load_over(fl, sems, threads=8, unavailable_ok=True, ttl_ms=5000,
                         answer_slack_s=UNREACHABLE_BOUND_S + 10)
        time.sleep(1.5)
        t0 = time.monotonic()
        sn.crash_primary(rejoin=False)  # (relaxed needs no replica to grant)
        switched = sn.switched_at - t0
        seen = []

        def probe():
            st, body = acquire(a, "probe", timeout_ms=0, ttl_ms=1000)
            seen.append((time.monotonic() - t0, st, (body or {}).get("detail", "")))
            if st == 200:
                a.request("DELETE", "/v1/leases/" + body["lease"])
            return st == 200
        fx.wait_until(probe, max_ttl_s + 30, "grants after the pause")
        load.stop()
        summary = load.check(min_grants=1, expect_contention=False)
        gap = longest_without_grants(load, t0, [t0 + x[0] for x in seen if x[1] == 200])
        refused = [x for x in seen if x[1] == 503 and "lost its state" in x[2]]
        assert refused, ("no grant was refused after the failover", seen[:5])
        assert seen[-1][0] >= switched, seen[-1]
        print("figure redis_failover kill9_relaxed replicas=1 no_grant_s=%.2f switched_s=%.2f"
              " max_ttl_s=%d; %s" % (gap, switched, max_ttl_s, summary))


if __name__ == "__main__":
    fx.main(globals())
