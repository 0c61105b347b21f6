# SPDX-License-Identifier: MIT
"""test_faults.py - the Python client when semad goes away: an acquire, a renewal and a
release that ride out a restart of semad (retries within the budget, the acquire's one
Idempotency-Key), a lease reported lost when no renewal can reach semad before its ttl ends,
and on Redis the 503 store_unavailable that a release waits out (Retry-After) while an
acquire is never sent again."""
import asyncio
import os
import threading
import time

import pytest

import sema
from conftest import SLOW, start, wait_until

import redis_fixture as rf


def semad_on(port, data):
    """A strict semad on a fixed port and data directory, so that a restart is the same
    server to its clients."""
    return start("--listen", "127.0.0.1:%d" % port, durability="strict", data=data)


def test_a_semad_restart_is_ridden_out(tmp_path):
    port, data = rf.free_port(), str(tmp_path / "data")
    s1 = semad_on(port, data)
    c = sema.Client("http://127.0.0.1:%d" % port, retry=10)
    sem = c.semaphore("restart")
    sem.create(2)
    held = sem.acquire(ttl=3)
    s1.stop()
    got, errors = [], []

    def acquire():
        try:
            got.append(sem.acquire(timeout=20))
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=acquire)
    t.start()
    time.sleep(0.5)  # semad stays down a while: the acquire and a renewal meet no one
    with semad_on(port, data) as s2:
        t.join(20 * SLOW)
        assert got and not errors, errors
        restarted = time.time()
        wait_until(lambda: held.expires_at > restarted + 2, timeout=5,
                   what="a renewal through the new semad")
        assert not held.lost.is_set(), held.error
        st = sem.state()
        assert st.held == 2 and {h.lease for h in st.holders} == {held.lease, got[0].lease}
        held.release()
        got[0].release()
        assert sem.state().held == 0
        c.close()
        assert s2.proc.poll() is None


def test_a_lease_is_lost_when_semad_is_gone(tmp_path):
    s = start()
    c = sema.Client(s.url(""), retry=0.5)
    sem = c.semaphore("gone")
    sem.create(1)
    p = sem.acquire(ttl=1.5)
    t0 = time.monotonic()
    s.kill()
    assert p.lost.wait(5 * SLOW), "lost once the ttl ran out without a renewal"
    assert 0.5 < time.monotonic() - t0 < 3 * SLOW
    assert p.error.code == "unreachable"
    with pytest.raises(sema.LeaseLost) as e:
        p.release()
    assert e.value.code == "unreachable"
    c.close()
    s.close()


def test_async_renewals_ride_out_a_restart(tmp_path):
    port, data = rf.free_port(), str(tmp_path / "data")
    s1 = semad_on(port, data)

    async def main():
        async with sema.AsyncClient("http://127.0.0.1:%d" % port, retry=10) as c:
            sem = c.semaphore("arestart")
            await sem.create(1)
            p = await sem.acquire(ttl=3)
            s1.stop()
            waiter = asyncio.ensure_future(c.semaphore("arestart").wait_idle(timeout=20))
            await asyncio.sleep(0.5)
            s2 = await asyncio.get_running_loop().run_in_executor(None, semad_on, port, data)
            try:
                restarted = time.time()
                deadline = time.monotonic() + 5 * SLOW
                while p.expires_at < restarted + 2 and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                assert p.expires_at >= restarted + 2 and not p.lost.is_set(), p.error
                assert not waiter.done()
                await p.release()
                await asyncio.wait_for(waiter, 10 * SLOW)  # idle now
            finally:
                s2.close()

    asyncio.run(asyncio.wait_for(main(), 60 * SLOW))


def test_redis_away_release_waits_out_503():
    try:
        rf.need_redis_engine()
    except rf.fx.Skip as e:
        pytest.skip(str(e))
    r = rf.RedisServer(aof=True)
    with r, rf.Fleet(r.url() + "?replicas=0", 1, durability="strict") as fleet:
        c = sema.Client(fleet[0].url(""), retry=30)
        sem = c.semaphore("away")
        sem.create(1)
        p = sem.acquire()
        r.kill()
        with pytest.raises(sema.Unavailable) as e:
            sem.acquire(timeout=0)  # an acquire answered 503 is never sent again
        assert e.value.status == 503 and e.value.retry_after == 1.0
        done, errors = [], []

        def release():
            try:
                p.release()
                done.append(time.monotonic())
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=release)
        t.start()
        time.sleep(1.5)  # Redis stays away a while: the release keeps being answered 503
        assert not done and not errors, errors
        r.start()
        t.join(30 * SLOW)
        assert done and not errors, errors
        assert sem.state().held == 0
        c.close()


if __name__ == "__main__":
    raise SystemExit(pytest.main([os.path.abspath(__file__)]))
