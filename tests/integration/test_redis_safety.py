# SPDX-License-Identifier: MIT
"""test_redis_safety.py - three semad instances on one redis-server behave as one server:
random load through all three under the client-side safety checker (safety_checker.py:
held weight never above capacity, grants in queue order, fences strictly increasing and in
Redis-clock order, every waiter answered by its timeout, wait-idle only when idle, all units
back at rest), cross-instance hand-offs measured with `sema bench -s A -s B -m handoff`,
and idle waiters that cost Redis nothing but heartbeats. Skips when semad has no Redis back
end."""
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis_fixture as rf  # noqa: E402
import safety_checker as sc  # noqa: E402
import semad_fixture as fx  # noqa: E402

SEMS = {"r1": 1, "r2": 2, "r5": 5}
DURATION = max(3.0, 6.0 * min(1.0, fx.SCALE))


def sema_path():
    p = os.environ.get("SEMA_BIN")
    if p:
        return p
    return os.path.join(os.path.dirname(fx.semad_path()), "sema")


def test_random_load_through_three_instances():
    rf.need_redis_engine()
    with rf.RedisServer() as r, rf.Fleet(r.url(), 3, "--max-connections", "1000") as fl:
        for name, cap in SEMS.items():
            st, _ = fl.json("PUT", "/v1/semaphores/" + name, {"capacity": cap})
            assert st == 201, st
        load = sc.Load(lambda: random.choice(fl.live()), SEMS, threads=24, seed=7,
                       instances=fl.live)
        load.run_for(DURATION)
        summary = load.check(min_grants=60 if fx.SCALE >= 1 else 15)
        assert summary["fifo_pairs"] > 0, ("the monitor never saw two granted requests "
                                           "queued together", summary)
        sc.wait_rest(fl.live(), SEMS, timeout=10, load=load)
        # Redis holds nothing of a semaphore at rest but what it must (no leftover waiters,
        # leases or wake-up records): every instance agrees, and a new grant works.
        for s in fl.live():
            st, lease = s.json("POST", "/v1/semaphores/r5/acquire", {"weight": 5,
                                                                     "timeout_ms": 0})
            assert st == 200, (st, lease)
            assert s.request("DELETE", "/v1/leases/" + lease["lease"])[0] == 204
        print(summary)


def test_handoff_across_instances():
    """A release on one instance wakes the waiter parked on another by a message, not by
    a poll: `sema bench -m handoff` with two servers alternates the direction every round."""
    rf.need_redis_engine()
    with rf.RedisServer() as r, rf.Fleet(r.url(), 2) as fl:
        out = subprocess.run([sema_path(), "bench", "-s", "http://127.0.0.1:%d" % fl[0].port,
                              "-s", "http://127.0.0.1:%d" % fl[1].port, "-m", "handoff",
                              "-n", "200", "--name", "ho", "--json"],
                             capture_output=True, timeout=120 * fx.SLOW)
        assert out.returncode == 0, out.stderr.decode()
        j = json.loads(out.stdout)
        assert j["ops"] == 200 and j["errors"] == 0, j
        # a wake-up left to the fallback (the next heartbeat's collect, every 2 s) would put
        # the median near a second; a message comes in milliseconds, also on a loaded machine
        # (a p50 of 10.3 ms was seen beside two CPU hogs). That nothing polls instead is
        # idle_waiters_cost_only_heartbeats' check: it counts the commands Redis receives.
        assert j["p50_us"] < 250000 * fx.SLOW, ("wake-up p50 %.0f us" % j["p50_us"], j)
        print("cross-instance hand-off p50 %.0f us, p99 %.0f us" % (j["p50_us"], j["p99_us"]))


def test_idle_waiters_cost_only_heartbeats():
    """200 waiters parked on two instances for 3 s: Redis sees only the instances'
    heartbeats (a few commands a second), not a command per waiter per poll."""
    rf.need_redis_engine()
    with rf.RedisServer() as r, rf.Fleet(r.url(), 2) as fl:
        st, _ = fl.json("PUT", "/v1/semaphores/idle", {"capacity": 1})
        st, holder = fl.json("POST", "/v1/semaphores/idle/acquire", {"ttl_ms": 600000})
        assert st == 200, holder
        socks = []
        for i in range(200):
            s = fl[i % 2].raw(timeout=60)
            s.sendall(fx.raw_request("POST", "/v1/semaphores/idle/acquire", {"owner": "i%d" % i}))
            socks.append(s)
        fx.wait_until(lambda: fl.json("GET", "/v1/semaphores/idle")[1]["waiting"] == 200, 20,
                      "200 waiters to park")
        time.sleep(0.5)
        mon = rf.Monitor(r.port)
        try:
            t0 = time.time()
            time.sleep(3.0)
            t1 = time.time()
            time.sleep(0.3)  # MONITOR's last lines
            sent, by_scripts = mon.count(t0, t1)
        finally:
            mon.close()
        rate = sum(sent.values()) / (t1 - t0)
        # two instances, each a heartbeat every couple of seconds: far below one command per
        # waiter per second (a poll every 10 ms would be 20,000 a second).
        assert rate < 10, ("commands/s sent with 200 idle waiters: %.1f" % rate, sent)
        for s in socks:
            s.close()
        fx.wait_until(lambda: fl.json("GET", "/v1/semaphores/idle")[1]["waiting"] == 0, 20,
                      "the waiters to leave when their clients go")
        assert fl.request("DELETE", "/v1/leases/" + holder["lease"])[0] == 204
        print("%.1f Redis commands/s with 200 idle waiters on two instances: %s (scripts ran %s)"
              % (rate, sent, by_scripts))


def test_a_semaphore_used_less_than_once_a_second_takes_the_short_path():
    """An uncontended acquire on a semaphore whose row last went the general way more than a
    second ago (its row's copy of the horizon, kept a second ahead, is behind) takes the short
    path all the same while another semaphore's grants keep the epoch's horizon ahead: one
    HGET of it, not the epoch's whole hash and the row written whole (with 1,000 semaphores
    each used about once a second, most acquires went the general way)."""
    rf.need_redis_engine()
    with rf.RedisServer() as r, rf.Fleet(r.url(), 1) as fl:
        s = fl[0]
        for n in ("busy", "rare"):
            st, _ = s.json("PUT", "/v1/semaphores/" + n, {"capacity": 10})
            assert st == 201, st

        def pair(n):
            st, lease = s.json("POST", "/v1/semaphores/%s/acquire" % n, {"ttl_ms": 60000})
            assert st == 200, lease
            assert s.request("DELETE", "/v1/leases/" + lease["lease"])[0] == 204

        pair("rare")
        pair("rare")  # (its row has a due time now: the short path's other condition)
        mon = rf.Monitor(r.port)
        try:
            for attempt in range(5):
                t_rare = time.time()
                # the row's horizon falls behind: its lease's ttl ahead plus a second
                fx.wait_until(lambda: time.time() > t_rare + 1.2, 5, "a second to pass")
                t0 = time.time()
                pair("busy")  # (it moves the epoch's horizon a second past its lease)
                pair("rare")
                t1 = time.time()

                def seen():
                    """The window's lines once MONITOR has shown rare's release (after
                    its acquire's own lines)."""
                    c = [ln.decode(errors="replace") for ln in list(mon.lines)
                         if t0 <= float(ln.split(b" ", 1)[0] or 0) <= t1]
                    return c if sum(rf.fcall_op(ln) == "lease_release" for ln in c) == 2 else None
                calls = fx.wait_until(seen, 10, "MONITOR's lines of the two pairs")
                fcalls = [i for i, ln in enumerate(calls) if rf.fcall_op(ln) == "acquire"]
                assert len(fcalls) == 2, calls
                # (the second acquire must come within the second after the first)
                t_busy, t_r = (float(calls[i].split(" ", 1)[0]) for i in fcalls)
                if t_r - t_busy < 0.9:
                    break
            else:
                raise AssertionError("the two acquires never came within a second")
            mine = []
            for ln in calls[fcalls[1] + 1:]:
                if "[0 lua]" not in ln:
                    break
                mine.append(ln.split('"')[1].upper())
            assert "HMGET" not in mine and "SETRANGE" in mine and "HGET" in mine, mine
        finally:
            mon.close()


if __name__ == "__main__":
    fx.main(globals())
