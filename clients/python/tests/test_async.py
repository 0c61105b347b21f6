# SPDX-License-Identifier: MIT
"""test_async.py - sema.AsyncClient against a real semad: every method as a coroutine,
``async with`` under exceptions and cancellation, a cancelled acquire leaving nothing held
(also when the cancel races the grant), map_limit on tasks, event streams, tickets, the
legacy API and lease loss."""
import asyncio
import os
import time

import pytest

import sema
from sema import events
from conftest import REDIS, SLOW, await_until, urls


def run(coro, timeout=60):
    """One test's coroutine on a fresh event loop, bounded in time."""
    return asyncio.run(asyncio.wait_for(coro, timeout * SLOW))


async def idle(sem):
    st = await sem.state()
    return st.held == 0 and st.waiting == 0 and st.available == st.capacity


async def parked(sem, n=1):
    return (await sem.state()).waiting == n


def test_semaphore_calls(url, name):
    async def main():
        async with sema.AsyncClient(url) as c:
            sem = c.semaphore(name)
            assert await sem.create(3) is True and await sem.create(3) is False
            with pytest.raises(sema.Conflict):
                await sem.create(1)
            p = await sem.acquire(2, timeout=5, ttl=30, owner="w1")
            assert isinstance(p, sema.AsyncPermit)
            assert (p.weight, p.owner, p.ttl, p.name) == (2, "w1", 30.0, name)
            assert p.expires_at > time.time() + 25 and p.fence > 0
            st = await sem.state()
            assert st.held == 2 and st.holders[0].lease == p.lease
            assert await sem.try_acquire(2) is None
            with pytest.raises(sema.Busy):
                await sem.acquire(2, timeout=0)
            with pytest.raises(sema.Timeout):
                await sem.acquire(2, timeout=0.1)
            with pytest.raises(sema.TooHeavy):
                await sem.acquire(4)
            await p.release()
            await p.release()
            q = await sem.acquire(1)
            await sem.release(1)
            assert q.released
            with pytest.raises(sema.Overflow):
                await sem.release(1)
            assert (await sem.resize(4)).capacity == 4
            await sem.wait_idle(timeout=1)
            with pytest.raises(sema.LeaseLost):
                await c.lease(p.lease)
            await sem.delete()
            with pytest.raises(sema.NotFound):
                await sem.state()
    run(main())


def test_async_with_releases_on_exceptions(url, name):
    async def main():
        async with sema.AsyncClient(url) as c:
            sem = c.semaphore(name)
            await sem.create(2)
            async with sem.permit(2, timeout=5) as p:
                assert (await sem.state()).held == 2
            assert p.released and await idle(sem)
            with pytest.raises(ZeroDivisionError):
                async with sem.permit():
                    1 / 0
            assert await idle(sem)
            with pytest.raises(KeyError):
                async with await sem.acquire() as q:
                    raise KeyError("x")
            assert q.released and await idle(sem)
    run(main())


def test_cancel_inside_async_with_releases(url, name):
    async def main():
        async with sema.AsyncClient(url) as c:
            sem = c.semaphore(name)
            await sem.create(1)
            inside = asyncio.Event()

            async def work():
                async with sem.permit():
                    inside.set()
                    await asyncio.sleep(3600)

            t = asyncio.ensure_future(work())
            await inside.wait()
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            await await_until(lambda: idle(sem), what="the permit released")
    run(main())


def test_cancelled_acquire_leaves_nothing(url, name):
    async def main():
        async with sema.AsyncClient(url) as c:
            sem = c.semaphore(name)
            await sem.create(1)
            held = await sem.acquire()
            waiter = asyncio.ensure_future(sem.acquire())
            await await_until(lambda: parked(sem), what="the acquire to park")
            t0 = time.monotonic()
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert time.monotonic() - t0 < 2
            await await_until(lambda: parked(sem, 0), what="semad to drop the waiter")
            await held.release()
            await await_until(lambda: idle(sem), what="nothing held")
            # a deadline around the call is a cancellation too
            held = await sem.acquire()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sem.acquire(), 0.2)
            await held.release()
            await await_until(lambda: idle(sem), what="nothing held after wait_for")
    run(main())


def test_cancel_racing_the_grant_leaves_nothing(url, name):
    """A release and a cancel of the waiter at the same moment: whichever wins, the units end
    back in the pool (a grant whose reply the cancelled call did not read is released)."""
    async def main():
        async with sema.AsyncClient(url) as c, sema.AsyncClient(url) as other:
            sem = c.semaphore(name)
            await sem.create(1)
            for i in range(20):
                held = await other.semaphore(name).acquire()
                waiter = asyncio.ensure_future(sem.acquire(ttl=60))
                await await_until(lambda: parked(sem), what="the waiter")
                release = asyncio.ensure_future(held.release())
                await asyncio.sleep(0.0005 * (i % 4))
                waiter.cancel()
                await release
                try:
                    p = await waiter
                    await p.release()  # the grant won before the cancel was seen
                except asyncio.CancelledError:
                    pass
                await await_until(lambda: idle(sem), timeout=10,
                                  what="nothing held after round %d" % i)
    run(main())


def test_keyed_locks(url, name):
    async def main():
        async with sema.AsyncClient(url) as c:
            lock = c.lock(name)
            async with lock.read() as r1, lock.read() as r2:
                assert r1.mode == r2.mode == "shared"
                assert (await lock.state()).readers == 2
                assert await lock.try_acquire("exclusive") is None
            async with lock.write(timeout=5) as w:
                assert w.mode == "exclusive" and w.key == name
                assert await lock.try_acquire("shared") is None
            with pytest.raises(sema.NotFound):
                await lock.state()
    run(main())


def test_map_limit(url, name):
    async def main():
        async with sema.AsyncClient(url) as c:
            sem = c.semaphore(name)
            await sem.create(10)
            running, most = [0], [0]

            async def work(x):
                running[0] += 1
                most[0] = max(most[0], running[0])
                await asyncio.sleep(0.01)
                running[0] -= 1
                return x + 1

            assert await sem.map_limit(range(15), 4, work) == list(range(1, 16))
            assert 1 <= most[0] <= 4

            async def items():
                for i in range(3):
                    yield i

            assert await sem.map_limit(items(), 2, work) == [1, 2, 3]
            assert await idle(sem)
    run(main())


def test_map_limit_fails_fast(url, name):
    async def main():
        async with sema.AsyncClient(url) as c:
            sem = c.semaphore(name)
            await sem.create(1)
            started = []

            async def work(x):
                started.append(x)
                await asyncio.sleep(0.01)
                if x == 1:
                    raise RuntimeError("item 1")
                return x

            with pytest.raises(RuntimeError, match="item 1"):
                await sem.map_limit(range(50), 3, work)
            assert started[:2] == [0, 1] and len(started) < 50
            await await_until(lambda: idle(sem), what="every unit back")
            # cancelling map_limit cancels its running calls and holds nothing
            task = asyncio.ensure_future(sem.map_limit(range(5), 2, lambda x: asyncio.sleep(60)))
            await await_until(lambda: parked(sem, 0), what="map_limit to start")
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await await_until(lambda: idle(sem), what="every unit back after the cancel")
    run(main())


def test_watch_and_tickets(url, name):
    async def main():
        async with sema.AsyncClient(url) as c:
            sem = c.semaphore(name)
            await sem.create(1)
            seen = []

            async def read():
                async for e in sem.watch():
                    seen.append(e)

            reader = asyncio.ensure_future(read())
            while not seen:  # until the stream is open and saw something
                await (await sem.acquire()).release()
                await asyncio.sleep(0.05)
            held = await sem.acquire()
            ticket = await sem.take_ticket(keepalive=30)
            assert ticket.status == "waiting" and ticket.position == 1
            states = []
            async with ticket.updates() as ups:
                async for st in ups:
                    states.append(st)
                    if len(states) == 1:
                        await held.release()
            assert [s.status for s in states] == ["waiting", "granted"]
            p = await ticket.wait_turn()
            assert p.lease == states[-1].lease.lease
            again = await c.ticket(ticket.id)  # read back by id while its lease lives
            assert again.status == "granted" and again.lease.lease == p.lease
            await p.release()
            t2 = await sem.take_ticket()
            await t2.leave()
            with pytest.raises(sema.TicketEnded):
                await t2.refresh()
            held = await sem.acquire()
            t3 = await sem.take_ticket()
            waiting = asyncio.ensure_future(t3.wait_turn(timeout=20))
            await asyncio.sleep(0.1)
            await held.release()
            p3 = await waiting
            await p3.release()
            await sem.delete()
            await asyncio.wait_for(reader, 10)
            assert isinstance(seen[-1], events.Deleted)
            assert any(isinstance(e, events.Granted) and e.lease == p3.lease for e in seen)
            with pytest.raises(sema.NotFound):
                async for _ in c.watch(name):
                    pass
    run(main())


def test_watch_cancelled(url, name):
    async def main():
        async with sema.AsyncClient(url) as c:
            sem = c.semaphore(name)
            await sem.create(1)

            async def read():
                async for _ in sem.watch():
                    pass

            t = asyncio.ensure_future(read())
            await asyncio.sleep(0.1)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
    run(main())


def test_legacy(url, name):
    async def main():
        async with sema.AsyncClient(url) as c:
            lg = c.legacy
            assert await lg.create(name, 1) is True
            assert await lg.down(name) == 0 and await lg.down(name) is None
            assert await lg.up(name) == 1 and await lg.value(name) == 1
            assert await lg.delete(name) is True and await lg.delete(name) is False
    run(main())


def test_lease_loss_and_renewal(url, name):
    async def main():
        async with sema.AsyncClient(url) as c:
            sem = c.semaphore(name)
            await sem.create(2)
            p = await sem.acquire(ttl=2)
            first = p.expires_at
            await await_until(lambda: _true(p.expires_at > first + 0.3), timeout=4,
                              what="a renewal")
            await asyncio.sleep(2.2)  # past the first ttl: only renewals keep it
            assert not p.lost.is_set(), p.error
            assert (await c.lease(p.lease)).lease == p.lease
            await c.revoke(p.lease)
            await asyncio.wait_for(p.lost.wait(), 3)
            assert p.error.code == "lease_revoked"
            with pytest.raises(sema.LeaseLost):
                await p.release()
            q = await sem.acquire(ttl=1)
            await sem.delete()
            await asyncio.wait_for(q.lost.wait(), 3)
            assert q.error.code in ("deleted", "not_found")
    run(main())


async def _true(v):
    return v


def test_a_client_for_each_event_loop(url, name):
    """A client used from a second asyncio.run (a new loop) opens new connections."""
    c = sema.AsyncClient(url)

    async def once():
        sem = c.semaphore(name)
        await sem.create(1)
        async with sem.permit():
            pass

    run(once())
    run(once())
    run(c.close())


@pytest.mark.skipif(REDIS < 3, reason="needs three semad instances on one Redis")
def test_across_instances(server, name):
    async def main():
        a, b = sema.AsyncClient(urls(server)[0]), sema.AsyncClient(urls(server)[2])
        await a.semaphore(name).create(1)
        p = await a.semaphore(name).acquire()
        w = asyncio.ensure_future(b.semaphore(name).acquire())
        await await_until(lambda: parked(a.semaphore(name)), what="the waiter on C")
        w.cancel()
        with pytest.raises(asyncio.CancelledError):
            await w
        await await_until(lambda: parked(a.semaphore(name), 0), what="C drops it")
        await p.release()
        await await_until(lambda: idle(b.semaphore(name)), what="nothing held")
        await a.close()
        await b.close()
    run(main())


if __name__ == "__main__":
    raise SystemExit(pytest.main([os.path.abspath(__file__)]))
