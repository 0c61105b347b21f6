# SPDX-License-Identifier: MIT
"""test_semad_cluster.py - semad instances on a real Redis Cluster (--engine
redis+cluster://): three primaries with a replica each on loopback
(redis_cluster_fixture.py), what the cluster adds to semad on one Redis: semaphores spread over
every primary, lease ids that any instance finds in one call, wake-ups on sharded channels, a
clear answer for what is not served yet, and the faults of a cluster (kill -9 of one primary,
CLUSTER FAILOVER of a replica, a killed sharded subscriber connection).

Each case is its own CTest test with its own cluster (cluster.* tests run one at a time:
RESOURCE_LOCK redis_cluster); every wait is bounded."""
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis_cluster_fixture as cf  # noqa: E402
import redis_fixture as rf  # noqa: E402
import safety_checker as sc  # noqa: E402
import semad_fixture as fx  # noqa: E402

SLOW = fx.SLOW
FAILOVER_BOUND_S = 30.0 * SLOW  # a primary killed: its replica serves its slots by then


def cluster_fleet(n=2, *args, query="", durability="none", **kw):
    """A cluster and n semad instances on it (args: semad's own; query: the URL's)."""
    rf.need_redis_engine()
    cf.need_cluster_tools()
    c = cf.Cluster(**kw)
    try:
        return c, rf.Fleet("redis+cluster://" + c.seeds() + query, n, *args,
                           durability=durability)
    except BaseException:
        c.close()
        raise


def put(s, name, cap):
    st, body = s.json("PUT", "/v1/semaphores/" + name, {"capacity": cap})
    assert st in (200, 201), (name, st, body)


def acquire(s, name, **body):
    return s.json("POST", "/v1/semaphores/%s/acquire" % name, body)


def release(s, lease):
    return s.request("DELETE", "/v1/leases/" + lease)[0]


def park(a, b, name, timeout_ms):
    """An acquire of name through a that waits (on a thread; its answer in out["r"]), once b
    sees it parked."""
    out = {}
    t = threading.Thread(target=lambda: out.update(r=acquire(a, name, timeout_ms=timeout_ms)))
    t.start()
    fx.wait_until(lambda: b.json("GET", "/v1/semaphores/" + name)[1]["waiting"] == 1, 10,
                  "the parked acquire")
    return t, out


def where(c, names):
    """{name: port of the primary that holds its row}: read from the primaries' keys."""
    out = {}
    for p in c.primaries():
        for k in cf.command(p.port, "KEYS", "sema:{*}s:*:m"):
            out[k.decode().split("}s:", 1)[1][:-2]] = p.port
    missing = [n for n in names if n not in out]
    assert not missing, missing
    return out


def test_semaphores_spread_over_every_primary_and_instances_share_them():
    c, f = cluster_fleet()
    try:
        a, b = f[0], f[1]
        names = ["s%d" % i for i in range(30)]
        def trouble():  # each instance's commands timed out and connections made again
            return [fx.metric(s, m) or 0 for s in (a, b)
                    for m in ("semad_redis_command_timeouts_total", "semad_redis_reconnects_total")]

        trouble_before = trouble()
        # (FCALLs, Redis's clock read, FCALLs that failed) of each primary, of one moment
        stats = (("fcall", "calls"), ("time", "calls"), ("fcall", "failed_calls"))
        before = c.counts(*stats)
        for n in names:
            put(a, n, 1)
            st, l = acquire(b, n)
            assert st == 200, l
            assert a.json("GET", "/v1/leases/" + l["lease"])[0] == 200  # found by its id
            assert release(a, l["lease"]) == 204
        spread = where(c, names)
        after = c.counts(*stats)
        assert len(set(spread.values())) == 3, spread
        for port in after:  # every primary ran scripts
            assert after[port][0] - before.get(port, [0])[0] >= 10, (before, after)
        # a release nobody waits for (the lease found by its id) takes the short path, packed
        # as on one Redis: the one call that reads no clock (every other call reads Redis's
        # TIME once, semad's own hellos, heartbeats and sweeps meanwhile too; a primary's first
        # hello fails, and reads no clock, before semad loads the library there). Every one of
        # them, on a loaded machine too, unless a command timed out (sent again, a release
        # takes the general path). Unpacked, none would.
        def no_clock(fcalls, clock, failed):
            return fcalls - clock - failed

        short = sum(no_clock(*after[p]) - no_clock(*before.get(p, [0, 0, 0])) for p in after)
        upset = [x - y for x, y in zip(trouble(), trouble_before)]
        why = (short, upset, before, after)
        assert short == len(names) or (any(upset) and short >= len(names) // 2), why
        # a waiter on one instance, granted by a release on the other (SPUBLISH on its slot)
        st, l = acquire(a, "s7", ttl_ms=30000)
        assert st == 200, l
        t, out = park(a, b, "s7", 20000)
        # a's sharded subscription to the slot is up (SSUBSCRIBE answered) before the release:
        # a message published before it would reach nobody (the heartbeat collects the grant)
        fx.wait_until(lambda: cf.command(spread["s7"], "PUBSUB", "SHARDCHANNELS", "*wake:*"), 10,
                      "a's subscription to s7's slot")
        wakes = fx.metric(a, "semad_redis_wakeups_total")
        t0 = time.monotonic()
        assert release(b, l["lease"]) == 204
        t.join(30)
        assert out["r"][0] == 200, out
        # woken by its message: a counts it (waited for: a heartbeat may have collected the
        # grant first). The time tells nothing: the heartbeat that collects a grant whose
        # message was lost comes every 1.6 to 2 s, so at any time after the release.
        fx.wait_until(lambda: fx.metric(a, "semad_redis_wakeups_total") > wakes, 5,
                      "a's wake-up message (SPUBLISH on the semaphore's slot)")
        print("woken on a %.3f s after the release on b" % (time.monotonic() - t0))
        # every primary's semaphores in one list, in name order, through either instance
        for s in (a, b):
            st, p = s.json("GET", "/v1/semaphores")
            assert st == 200 and p["next_cursor"] is None, p
            assert [x["name"] for x in p["semaphores"]] == sorted(names), p
        assert a.json("GET", "/v1/leases/Zzzz-not-a-slot-id")[0] == 404
    finally:
        f.close()
        c.close()


def error_count(node):
    """How many errors node has answered (INFO errorstats, every kind)."""
    return sum(int(v.split("=", 1)[1].split(",")[0]) for v in node.info("errorstats").values())


def pages(s, limit, between=lambda page: None, prefix="n"):
    """Every name of the listing through s, page by page (limit a page), calling between(k)
    after page k."""
    seen, cursor, k = [], None, 0
    while True:
        q = "/v1/semaphores?prefix=%s&limit=%d" % (prefix, limit)
        st, page = s.json("GET", q + ("&cursor=" + cursor if cursor else ""), timeout=60)
        assert st == 200, page
        assert len(page["semaphores"]) <= limit, page
        seen += [x["name"] for x in page["semaphores"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
        k += 1
        between(k)


def test_a_listing_skips_and_repeats_nothing_across_a_reshard_and_a_failover():
    """A list of many semaphores, page by page, while the slots of names not listed yet move to
    another primary (a page asked while one is half moved waits for it) and a primary fails
    over (CLUSTER FAILOVER): every name that existed throughout comes once, in name order."""
    rf.need_redis_engine()
    cf.need_cluster_tools()
    c = cf.Cluster()
    f = rf.Fleet("redis+cluster://%s?timeout=10000" % c.seeds(), 2, durability="none")
    try:
        a, b = f[0], f[1]
        names = ["n%02d" % i for i in range(40)]
        for n in names:
            put(a, n, 1)
        put(a, "other", 1)  # (outside the prefix)
        spread = where(c, names)
        assert pages(b, 1000) == names
        keys = [k.decode() for p in c.primaries()
                for k in cf.command(p.port, "KEYS", "sema:{*}s:n*:m")]
        slot_of = {k.split("}s:", 1)[1][:-2]: c.keyslot(k) for k in keys}
        tag_of = {k.split("}s:", 1)[1][:-2]: k[6:14] for k in keys}
        later = names[20:]

        def between(k):
            if k == 1:  # the slots of two names to come move, one while a page is asked
                n1, n2 = later[3], later[9]
                for n in (n1, n2):
                    dst = next(p for p in c.primaries() if p.port != c.owner(slot_of[n]).port)
                    m = cf.Migration(c, slot_of[n], dst)
                    m.begin()
                    m.move_keys(2)
                    if n == n1:
                        m.finish()
                        continue
                    # the slot's name index moves first: a page must not read the slot now
                    src, index = c.owner(slot_of[n]), "sema:{%s}names" % tag_of[n]
                    cf.command(src.port, "MIGRATE", "127.0.0.1", dst.port, index, 0, 5000)
                    errs = error_count(src)
                    out = {}
                    t = threading.Thread(target=lambda: out.update(r=a.json(
                        "GET", "/v1/semaphores?prefix=n&limit=50", timeout=60)))
                    t.start()
                    fx.wait_until(lambda: error_count(src) >= errs + 2 or "r" in out, 10,
                                  "the page refused by the half-moved slot's primary")
                    assert "r" not in out, "a page read a half-moved slot: %s" % out
                    m.finish()
                    t.join(60)
                    st, page = out["r"]
                    assert st == 200, page
                    assert [x["name"] for x in page["semaphores"]] == names, page
            if k == 2:  # the primary of a name to come fails over
                node = c.node_at(spread[later[-1]])
                cf.command(node.port, "WAIT", "1", "5000")
                c.failover(c.replicas(of=node)[0], timeout=FAILOVER_BOUND_S)
            if k == 3:
                put(b, "n25x", 1)  # (made meanwhile: listed or not, once at most)
                assert b.request("DELETE", "/v1/semaphores/n31")[0] == 204

        for s, limit in ((a, 6), (b, 7)):
            seen = pages(s, limit, between if s is a else lambda k: None)
            assert seen == sorted(set(seen)), seen
            assert set(names) - {"n31"} <= set(seen), sorted(set(names) - set(seen))
        assert pages(b, 1000) == sorted(set(names) - {"n31"} | {"n25x"})
        # a primary that holds many keys looks each of its slots up rather than scan its keys
        # (and so does one that migrates a slot away, above): the same page
        big = c.primaries()[0]
        pad = next("pad{%d}" % i for i in range(1000) if c.owner(c.keyslot("pad{%d}" % i)) is big)
        big.cli("DEBUG", "POPULATE", "60000", pad)
        lookups = big.commandstats().get("zrangebylex", 0)
        assert pages(a, 1000) == sorted(set(names) - {"n31"} | {"n25x"})
        assert big.commandstats().get("zrangebylex", 0) - lookups >= 5000, "not looked up"
    finally:
        f.close()
        c.close()


def hold_on_each_primary(c, f, ttl_ms=60000):
    """One semaphore of capacity 1 per primary, each held: {port: (name, lease, fence)}."""
    names = ["h%d" % i for i in range(24)]
    for n in names:
        put(f[0], n, 1)
    held = {}
    for n, port in where(c, names).items():
        if port not in held:
            st, l = acquire(f[1], n, ttl_ms=ttl_ms)
            assert st == 200, l
            held[port] = (n, l["lease"], l["fence"])
    assert len(held) == 3, held
    return held


class Load:
    """Acquire and release on the given semaphores, over and over, through both instances;
    counts what each answer was."""

    def __init__(self, f, names):
        self.f, self.names, self.stop = f, names, False
        self.ok, self.bad = 0, []
        self.t = threading.Thread(target=self.run)
        self.t.start()

    def run(self):
        i = 0
        while not self.stop:
            n = self.names[i % len(self.names)]
            st, l = acquire(self.f[i % 2], n, timeout_ms=5000)
            if st == 200:
                st = release(self.f[(i + 1) % 2], l["lease"])
            if st in (200, 204):
                self.ok += 1
            else:
                self.bad.append((n, st))
            i += 1

    def close(self):
        self.stop = True
        self.t.join(60)


MAX_TTL_S = 20  # the longest lease in the failover tests: what a new primary's slots pause for


def primary_fault(kill, strict_short=False):
    """A primary fails (kill -9, or CLUSTER FAILOVER of its replica): no grant on its
    semaphores until the longest lease has passed, the others untouched. strict_short:
    --durability strict with ?replicas=1 while each primary has two replicas: WAIT confirms a
    write on one of them, not necessarily the one promoted, so the pause is the same."""
    if strict_short:
        c, f = cluster_fleet(2, "--max-ttl", "%ds" % MAX_TTL_S, "--default-ttl", "2s",
                             query="?replicas=1", durability="strict", aof=True, replicas=2)
    else:
        c, f = cluster_fleet(2, "--max-ttl", "%ds" % MAX_TTL_S, "--default-ttl", "2s")
    try:
        t0 = time.monotonic()
        held = hold_on_each_primary(c, f, ttl_ms=MAX_TTL_S * 1000)
        victim = sorted(held)[0]
        name, lease, fence = held[victim]
        cf.command(victim, "WAIT", "1", "5000")  # its replica has the lease
        others = ["o%d" % i for i in range(12)]
        for n in others:
            put(f[0], n, 1)
        spread = where(c, others)
        calm = [n for n in others if spread[n] != victim]
        load = Load(f, calm)
        fx.wait_until(lambda: load.ok >= 10, 30, "load before the fault")
        node = c.node_at(victim)
        tk = time.monotonic()
        if kill:
            c.kill_primary(node, timeout=FAILOVER_BOUND_S)
        else:
            c.failover(c.replicas(of=node)[0], timeout=FAILOVER_BOUND_S)
        n0 = load.ok
        fx.wait_until(lambda: load.ok >= n0 + 10, 30, "load after the fault")
        load.close()
        # the other primaries' semaphores never noticed
        assert not load.bad, load.bad[:5]
        # the failed primary's semaphore: its lease kept (no second holder), and released
        for _ in range(2):
            st, l = acquire(f[0], name, timeout_ms=0)
            assert st in (409, 503), (st, l)
        fx.wait_until(lambda: release(f[0], lease) == 204, 30, "the release after the fault")
        released = time.monotonic()
        # meanwhile the other primaries' semaphores grant at once
        for n in calm[:4]:
            st, l = acquire(f[1], n, timeout_ms=0)
            assert st == 200, (n, l)
            assert release(f[0], l["lease"]) == 204
        # then no grant there until every lease granted before the change may have run out
        # (the new primary may lack grants the old one acknowledged): 503 until then
        seen = []

        def granted():
            st, l = acquire(f[len(seen) % 2], name, timeout_ms=0)
            seen.append((round(time.monotonic() - t0, 2), st, (l or {}).get("detail", "")))
            return st == 200 and l

        l = fx.wait_until(granted, MAX_TTL_S + 30, "a grant after the pause")
        at = time.monotonic()
        refused = [s for s in seen if s[1] == 503 and "lost its state" in s[2]]
        # (paused from the change, seen no sooner than the fault, for the longest lease)
        assert at - tk >= MAX_TTL_S, ("granted before a lease of the old primary could have "
                                      "run out", round(at - tk, 2), seen)
        assert all(s[1] in (503, 200) for s in seen), seen
        if released - t0 < MAX_TTL_S - 1:
            assert refused, seen
        assert l["fence"] > fence, (fence, l)
    finally:
        f.close()
        c.close()


def test_kill_9_of_one_primary_leaves_the_others_alone_and_over_admits_nothing():
    primary_fault(kill=True)


def test_cluster_failover_leaves_the_others_alone_and_over_admits_nothing():
    primary_fault(kill=False)


def test_strict_waiting_for_fewer_replicas_than_a_primary_has_pauses_after_its_kill_9():
    primary_fault(kill=True, strict_short=True)


def test_a_killed_sharded_subscriber_misses_no_wake_up():
    c, f = cluster_fleet()
    try:
        a, b = f[0], f[1]
        put(a, "k", 1)
        st, l = acquire(b, "k", ttl_ms=60000)
        assert st == 200, l
        t, out = park(a, b, "k", 30000)
        assert c.kill_sharded_subscribers() >= 1
        assert release(b, l["lease"]) == 204
        t.join(40)
        assert out["r"][0] == 200, out
    finally:
        f.close()
        c.close()


def test_a_grant_in_a_sweep_whose_answer_was_lost_reaches_its_waiter():
    """A lease expires while its slot's primary is stopped: the sweep that grants the parked
    waiter runs when the primary resumes, on a connection semad dropped (the command timed
    out). The slot's next answer checks the waiters there, and the waiter gets that lease (its
    lease id finds it), rather than waiting on with its permit held by nobody."""
    c, f = cluster_fleet(1, query="?timeout=300", replicas=0)
    try:
        a = f[0]
        put(a, "sw", 1)
        node = c.node_at(where(c, ["sw"])["sw"])
        ttl_s = 1.5
        t_grant = time.monotonic()
        st, holder = acquire(a, "sw", ttl_ms=int(ttl_s * 1000))
        assert st == 200, holder
        t, out = park(a, a, "sw", 30000)
        # stopped just before the expiry: the sweep goes out on a connection that times out
        time.sleep(max(0.0, t_grant + ttl_s - 0.15 - time.monotonic()))
        mark = len(a.log())
        os.kill(node.proc.pid, signal.SIGSTOP)
        try:
            fx.wait_until(lambda: any("did not answer in time" in x for x in a.log()[mark:])
                          and time.monotonic() > t_grant + ttl_s + 0.1, 10,
                          "the sweep to time out")
        finally:
            os.kill(node.proc.pid, signal.SIGCONT)
        t.join(10 * SLOW)
        assert out.get("r") and out["r"][0] == 200, ("the waiter granted in the lost sweep",
                                                     out, holder)
        assert release(a, out["r"][1]["lease"]) == 204
    finally:
        f.close()
        c.close()


def ask_count(node):
    """How many ASK errors node has answered (INFO errorstats)."""
    v = node.info("errorstats").get("errorstat_ASK", "count=0")
    return int(v.split("=", 1)[1].split(",")[0])


def test_a_slot_resharded_while_in_use_loses_and_doubles_no_grant_and_pauses_none():
    rf.need_redis_engine()
    cf.need_cluster_tools()
    c = cf.Cluster()
    # (requests on the moving slot wait for it, up to the command timeout: 10 s here)
    f = rf.Fleet("redis+cluster://%s?timeout=10000" % c.seeds(), 2, "--max-ttl",
                 "%ds" % MAX_TTL_S, "--default-ttl", "2s", durability="none")
    try:
        a, b = f[0], f[1]
        put(a, "r", 2)
        key = [k for p in c.primaries() for k in cf.command(p.port, "KEYS", "sema:{*}s:r:m")]
        slot = c.keyslot(key[0].decode())
        src = c.owner(slot)
        dst = next(p for p in c.primaries() if p.port != src.port)
        fences = []
        leases = []
        for s in (a, b):
            st, l = acquire(s, "r", ttl_ms=MAX_TTL_S * 1000)
            assert st == 200, l
            leases.append(l["lease"])
            fences.append(l["fence"])
        out = {}
        w = threading.Thread(target=lambda: out.update(
            w=a.json("POST", "/v1/semaphores/r/acquire", {"timeout_ms": 60000,
                                                            "ttl_ms": MAX_TTL_S * 1000}, timeout=90),
            w_at=time.monotonic()))
        w.start()
        fx.wait_until(lambda: b.json("GET", "/v1/semaphores/r")[1]["waiting"] == 1, 10,
                      "the parked acquire")
        m = cf.Migration(c, slot, dst)
        m.begin()
        assert m.move_keys(3) == 3  # the semaphore is half on each primary now
        asks = ask_count(src)
        rel = threading.Thread(target=lambda: out.update(r=release(b, leases[0])))
        rel.start()
        # the source answers ASK to the release, again and again: it waits, and runs nowhere
        fx.wait_until(lambda: ask_count(src) >= asks + 3 or "r" in out, 10, "ASK answers")
        assert "r" not in out, "answered while its semaphore was half moved: %s" % out
        m.finish()
        moved = time.monotonic()
        rel.join(30)
        # the slot's primary changed by a reshard: the old primary, still a primary, handed the
        # slot to a primary never promoted, so every write moved with the keys: no pause, the
        # parked acquire is granted by the release (a pause would hold it MAX_TTL_S)
        w.join(MAX_TTL_S + 60)
        logs = a.log() + b.log()
        assert out["r"] == 204, out
        assert out["w"][0] == 200, (out, logs[-40:])
        assert out["w_at"] - moved < MAX_TTL_S / 2, (out["w_at"] - moved, out, logs[-40:])
        assert any("a reshard, which carries every write" in x for x in logs), logs
        assert not any("nothing proves it has every acknowledged write" in x for x in logs), logs
        fences.append(out["w"][1]["fence"])
        assert c.owner(slot).port == dst.port
        assert release(a, leases[1]) == 204
        assert release(a, out["w"][1]["lease"]) == 204
        # the semaphore goes on, from both instances, on its new primary
        for i in range(10):
            st, l = acquire(f[i % 2], "r", timeout_ms=10000)
            assert st == 200, l
            fences.append(l["fence"])
            assert release(f[(i + 1) % 2], l["lease"]) == 204
        assert fences == sorted(fences) and len(set(fences)) == len(fences), fences
        st, v = a.json("GET", "/v1/semaphores/r")
        assert st == 200 and v["held"] == 0 and v["available"] == 2 and v["waiting"] == 0, v
    finally:
        f.close()
        c.close()



class MuteProxy(fx.Relay):
    """A relay on 127.0.0.2:port to the node at 127.0.0.1:port (the cluster names the node by
    that address once it announces it as its hostname): it forwards until mute(); from then on
    it accepts each new connection and never answers it, as a stopped or cut-off host does.
    asked: set once a muted connection sent ROLE (semad asking the old primary whether it
    handed a slot over), that connection in self.probe."""

    def __init__(self, port):
        self.target, self.muted, self.probe = ("127.0.0.1", port), False, None
        self.asked = threading.Event()
        self.mutes = []
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.2", port))
        self.lsock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.lsock.accept()
            except OSError:
                return  # closed
            if self.muted:
                self.mutes.append(conn)
                threading.Thread(target=self._listen, args=(conn,), daemon=True).start()
            else:
                self._join(conn, socket.create_connection(self.target))

    def _listen(self, conn):
        seen = b""
        try:
            while True:
                data = conn.recv(4096)
                if not data:
                    return  # its peer closed it (the EOF stays to be seen by is_open)
                seen += data
                if b"ROLE" in seen and not self.asked.is_set():
                    self.probe = conn
                    self.asked.set()
        except OSError:
            pass

    def mute(self):
        self.muted = True

    @staticmethod
    def is_open(conn):
        """Whether the peer has not closed conn (nothing is ever sent on a muted one)."""
        try:
            return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def close(self):
        self.lsock.close()
        for sk in self.mutes:
            sk.close()


def test_an_old_primary_that_never_answers_stalls_no_request():
    """A slot's primary changes: semad asks the old primary (and the new one) whether the slot
    was handed over before it says hello there again (redis_handover.c). Here the old primary
    is reached through a proxy that accepts the question's connection and never answers, as a
    stopped or cut-off host does: the question waits on the event loop, so a request on
    another primary's semaphore is answered while its connection is still open; the question
    gives up at its deadline (its connection closed) and the slot pauses, as after a
    failover."""
    rf.need_redis_engine()
    cf.need_cluster_tools()
    c = cf.Cluster()
    proxy = f = None
    try:
        old = c.primaries()[0]
        for n in c.live():  # (the map then names the old primary 127.0.0.2: the proxy)
            n.cli("CONFIG", "SET", "cluster-preferred-endpoint-type", "hostname")
            n.cli("CONFIG", "SET", "cluster-announce-hostname",
                  "127.0.0.2" if n is old else "127.0.0.1")
        proxy = MuteProxy(old.port)
        fx.wait_until(lambda: all("127.0.0.2" in sh and "?" not in sh.splitlines()
                                  for sh in (n.cli("CLUSTER", "SHARDS") for n in c.live())),
                      10, "every node to name every node by its hostname")
        f = rf.Fleet("redis+cluster://" + c.seeds(), 1, "--max-ttl", "%ds" % MAX_TTL_S,
                     "--default-ttl", "2s", durability="none")
        a = f[0]
        spread = {}
        while old.port not in spread.values() or len(set(spread.values())) < 2:
            put(a, "m%d" % len(spread), 1)  # (until one is on the old primary, one elsewhere)
            spread = where(c, ["m%d" % i for i in range(len(spread) + 1)])
        mine = next(n for n in spread if spread[n] == old.port)
        calm = next(n for n in spread if spread[n] != old.port)
        st, l = acquire(a, mine)  # (its slot's hello was answered through the proxy)
        assert st == 200 and release(a, l["lease"]) == 204, l
        key = [k for k in cf.command(old.port, "KEYS", "sema:{*}s:%s:m" % mine)][0]
        slot = c.keyslot(key.decode())
        proxy.mute()
        m = cf.Migration(c, slot, next(p for p in c.primaries() if p is not old))
        m.begin()
        m.finish()
        out = {}
        t = threading.Thread(target=lambda: out.update(r=acquire(a, mine, timeout_ms=0)))
        t.start()  # (MOVED: semad asks the old primary, through the mute proxy)
        assert proxy.asked.wait(10 * SLOW), "semad never asked the old primary"
        st, l = acquire(a, calm, timeout_ms=0)
        assert st == 200, l
        assert proxy.is_open(proxy.probe), \
            "answered only once the question had given up: the loop waited for it"
        assert release(a, l["lease"]) == 204
        fx.wait_until(lambda: not proxy.is_open(proxy.probe), 5, "the question to give up")
        t.join(30)
        assert out["r"][0] in (409, 503), out  # (nothing proven: the slot pauses)
        fx.wait_until(lambda: any("nothing proves it has every acknowledged write" in x
                                  for x in a.log()), 10, "the pause to be logged")
    finally:
        if f is not None:
            f.close()
        c.close()
        if proxy is not None:
            proxy.close()


def ticket_series(text):
    """The ticket counters of a /metrics text (kept in Redis, summed over the slots used)."""
    return sorted(x for x in text.splitlines() if x.startswith("semad_tickets"))


def events_request(a, name, last_id=None):
    """A socket that asked for name's event stream (with Last-Event-ID), unanswered yet."""
    sock = a.raw()
    extra = "Last-Event-ID: %s\r\n" % last_id if last_id else ""
    sock.sendall(("GET /v1/semaphores/%s/events HTTP/1.1\r\nHost: t\r\n%s\r\n"
                  % (name, extra)).encode())
    return sock


def sse_events(f, n):
    """The next n events of a stream read from f, as (id, type), its head read first."""
    out, ev = [], {}
    while len(out) < n:
        line = f.readline().decode()
        assert line, ("the stream ended", out)
        if line.startswith("HTTP/1.1 "):
            assert line.split()[1] == "200", line
        elif line.startswith(("id: ", "event: ")):
            k, _, v = line.rstrip("\r\n").partition(": ")
            ev[k] = v
        elif line in ("\n", "\r\n") and "event" in ev:
            out.append((ev.get("id"), ev["event"]))
            ev = {}
    return out


def unanswered(sock):
    """Whether nothing came on sock yet (looked at without waiting)."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)  # (data, or b"": closed)
        return False
    except BlockingIOError:
        return True
    finally:
        sock.setblocking(True)


def test_a_paused_primary_holds_back_metrics_but_never_the_loop():
    """/metrics sums counters kept in every slot semad has used, and an event stream's start
    reads its semaphore's log. With one primary paused (SIGSTOP), those reads wait on the
    event loop: /healthz and a semaphore on another primary are answered while /metrics and a
    stream resumed on the paused primary's semaphore still wait; once the primary goes on
    (SIGCONT) /metrics answers what it answered before the pause and the stream replays what
    followed its Last-Event-ID. The first seed is a host name ("localhost"), resolved without
    blocking the loop."""
    rf.need_redis_engine()
    cf.need_cluster_tools()
    c = cf.Cluster(node_timeout_ms=10000)  # (no failover while it is paused)
    f = None
    stopped = None
    try:
        seeds = c.seeds().replace("127.0.0.1", "localhost", 1)
        f = rf.Fleet("redis+cluster://%s?timeout=10000" % seeds, 1, durability="none")
        a = f[0]
        names = ["h%d" % i for i in range(12)]
        for n in names:
            put(a, n, 2)
            st, t = a.json("POST", "/v1/semaphores/%s/tickets" % n, {"weight": 1})
            assert st == 201, t
        spread = where(c, names)
        assert len(set(spread.values())) == 3, spread
        before = ticket_series(fx.metrics_text(a))
        assert "semad_tickets_created_total 12" in before, before
        e = events_request(a, names[0])
        f = e.makefile("rb")
        while f.readline() != b": subscribed\n":  # (its head, then the subscription)
            pass
        st, l = acquire(a, names[0])
        assert st == 200 and release(a, l["lease"]) == 204, l
        seen = sse_events(f, 2)
        assert [t for _, t in seen] == ["granted", "released"], seen
        f.close()
        e.close()
        paused = c.node_at(spread[names[0]])
        calm = next(n for n in names if spread[n] != paused.port)
        stopped = paused.proc.pid
        os.kill(stopped, signal.SIGSTOP)
        m = a.raw()
        m.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        e = events_request(a, names[0], seen[0][0])
        t0 = time.monotonic()
        assert a.request("GET", "/healthz")[0] == 200
        st, l = acquire(a, calm, timeout_ms=0)
        assert st == 200 and release(a, l["lease"]) == 204, l
        took = time.monotonic() - t0
        assert unanswered(m), "/metrics answered while its primary was paused: the loop waited"
        assert unanswered(e), "the stream answered while its primary was paused"
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        e.settimeout(10 * SLOW)
        f = e.makefile("rb")
        assert sse_events(f, 1) == [seen[1]], seen  # (what followed its Last-Event-ID)
        f.close()
        e.close()
        m.settimeout(10 * SLOW)
        with m.makefile("rb") as f:
            got = f.read()  # (Connection: close: to its end)
        m.close()
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
        assert ticket_series(got.decode().split("\r\n\r\n", 1)[1]) == before, got
        assert took < 2.0 * SLOW, took
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        if f is not None:
            f.close()
        c.close()


# ---- the safety checker under random load, semaphores on every primary ----

# capacities 1..3 over names that hash to slots of every primary
SAFETY_SEMS = {"q%02d" % i: 1 + i % 3 for i in range(18)}
SAFETY_S = max(3.0, 6.0 * min(1.0, fx.SCALE))  # the load's length without a fault
SAFETY_TTL_S = 3  # --max-ttl: what a promoted primary's slots pause for
# a request to the killed primary: its command unanswered 2 s drops the connection, 503 then
# (the load's answers may be that much late, plus the failover, as on a Sentinel failover)
UNREACHABLE_S = 2.0 + 3.0
STRICT_MAX_TTL_S = 60  # --max-ttl with strict durability: a pause this long would show


def safety_run(instances, kill, strict=False):
    """Random load (safety_checker.Load) over SAFETY_SEMS through `instances` semad
    instances, each request to one picked at random, with (`kill`) a kill -9 of one primary
    in the middle: what the checker checks (capacity, FIFO, fences, answers by their timeout,
    wait-idle, rest) holds throughout. With the kill, the other primaries' semaphores are
    never answered 503, and the victim's grant again once its replica has waited out the
    longest lease; with `strict` (--durability strict, ?replicas=1: every primary's one
    replica confirms each write before its reply, AOF always), at once: a max ttl of
    STRICT_MAX_TTL_S, which a pause would wait out, is far from reached."""
    max_ttl = STRICT_MAX_TTL_S if strict else SAFETY_TTL_S
    c, f = cluster_fleet(instances, "--max-connections", "1000", "--max-ttl", "%ds" % max_ttl,
                         "--default-ttl", "2s", query="?replicas=1" if strict else "",
                         durability="strict" if strict else "none", aof=strict)
    try:
        for name, cap in SAFETY_SEMS.items():
            put(f[0], name, cap)
        spread = where(c, SAFETY_SEMS)
        assert len(set(spread.values())) == 3, spread
        for p in c.primaries():
            cf.command(p.port, "WAIT", "1", "5000")  # every replica has every semaphore
        load = sc.Load(lambda: random.choice(f.live()), SAFETY_SEMS, threads=24, seed=11,
                       instances=f.live, ttl_ms=SAFETY_TTL_S * 1000, unavailable_ok=kill,
                       gone_ok=kill, answer_slack_s=UNREACHABLE_S + 10 if kill else 3.0)
        f.before_close.append(load.__exit__)  # a failed test stops its clients first
        load.start()
        victim = None
        if not kill:
            time.sleep(SAFETY_S)  # the load runs; every check is on what it saw
        else:
            fx.wait_until(lambda: len(load.grants) >= 50, 30, "grants before the fault")
            victim = sorted(set(spread.values()))[0]
            t_kill = time.monotonic()
            dead = c.node_at(victim)
            c.kill_primary(dead, timeout=FAILOVER_BOUND_S)
            if strict:  # (WAIT 1 needs a replica: the killed node rejoins as one)
                c.restart(dead, timeout=FAILOVER_BOUND_S)
            mine = [n for n, p in spread.items() if p == victim]

            after = 0.0 if strict else SAFETY_TTL_S  # (strict: no pause to wait out)

            def victim_grants():
                with load.lock:
                    return len([g for g in load.grants
                                if g["sem"] in mine and g["send"] > t_kill + after])
            try:
                fx.wait_until(lambda: victim_grants() >= 10, SAFETY_TTL_S + 30,
                              "grants on the failed primary's semaphores after its pause")
                assert not strict or time.monotonic() - t_kill < STRICT_MAX_TTL_S - 10, \
                    "strict: the failed primary's semaphores paused"
                if strict:  # (the load goes on as long as it would have across a pause)
                    n = len(load.grants)
                    fx.wait_until(lambda: len(load.grants) >= n + 400, 60, "load after the kill")
                logs = f.log()
                assert not strict or (
                    any("WAIT counted them all): grants go on" in x for x in logs) and
                    not any("nothing proves it has every acknowledged" in x for x in logs)), \
                    logs[-30:]
            except AssertionError:
                sem_of = {o: s for s, _, o in load.sends}
                said = [(o, x) for o, x in list(load.said.items()) if sem_of.get(o) in mine]
                raise AssertionError("no grant on %s after the pause: last answers %s; %s"
                                     % (mine, said[-10:], f.log()[-30:]))
        load.stop()
        summary = load.check(min_grants=60 if fx.SCALE >= 1 else 15)
        assert summary["fifo_pairs"] > 0, ("the monitor never saw two granted requests "
                                           "queued together", summary)
        if kill:
            sem_of = {o: s for s, _, o in load.sends}
            hit = {sem_of[o] for o in load.acquire_503 | load.release_503 | load.gone}
            calm = sorted(n for n in hit if spread[n] != victim)
            assert not calm, ("semaphores of the primaries still up were answered 503, or "
                              "their leases lost", calm, summary)
        # (a lease whose release met the pause lives on to its ttl)
        sc.wait_rest(f.live(), SAFETY_SEMS, timeout=10 + SAFETY_TTL_S, load=load)
        print("%d instances%s: %s" % (instances, ", kill -9 of primary %d" % victim
                                      if kill else "", summary))
    finally:
        f.close()
        c.close()


def test_safety_checker_random_load_through_one_instance():
    safety_run(1, kill=False)


def test_safety_checker_random_load_through_three_instances():
    safety_run(3, kill=False)


def test_strict_safety_checker_random_load_through_three_instances_kill_9_of_one_primary():
    """--durability strict with ?replicas=1 on a cluster: every reply waits for its primary's
    WAIT; a kill -9 of a primary under load over-admits nothing, reuses no fence, and its
    semaphores grant again as soon as its replica serves them (WAIT counted every replica)."""
    safety_run(3, kill=True, strict=True)


def test_safety_checker_random_load_through_three_instances_kill_9_of_one_primary():
    safety_run(3, kill=True)


if __name__ == "__main__":
    fx.main(globals())
