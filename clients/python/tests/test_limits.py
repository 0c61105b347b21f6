# SPDX-License-Identifier: MIT
"""test_limits.py - several semaphores at once, tenants and rates through the Python
clients (sync and asyncio), against a real semad: all or nothing, one lease with a fence on
each semaphore, tickets on several semaphores and tickets' tenants, a tenant's cap, the
limits on create and configure and in the state."""
import asyncio
import threading

import pytest

from conftest import await_until, idle, wait_until

import sema


def make(client, name, capacity, **limits):
    sem = client.semaphore(name)
    assert sem.create(capacity, **limits) is True
    return sem


def test_acquire_all_holds_every_part_as_one_lease(client, name):
    gpu, db = make(client, name + "/gpu", 2), make(client, name + "/db", 1)
    with client.permit_all({gpu.name: 2, db.name: 1}, ttl=30, owner="job-1") as p:
        assert [(x.name, x.weight) for x in p.parts] == [(gpu.name, 2), (db.name, 1)]
        assert p.fences == {gpu.name: p.parts[0].fence, db.name: p.parts[1].fence}
        assert (p.name, p.weight, p.fence) == (gpu.name, 2, p.parts[0].fence)
        assert p.owner == "job-1" and p.tenant is None
        for sem, w in ((gpu, 2), (db, 1)):
            st = sem.state()
            assert st.held == w and st.available == 0, st
            assert st.holders[0].lease == p.lease and st.holders[0].multi, st
        # a renewal keeps every part
        p.renew(60)
        assert p.ttl == 60 and [x.name for x in p.parts] == [gpu.name, db.name]
        assert client.lease(p.lease).fences == p.fences
    assert idle(gpu) and idle(db)


def test_acquire_all_takes_nothing_unless_everything_fits(client, name):
    a, b = make(client, name + "/a", 2), make(client, name + "/b", 2)
    held = a.acquire(2)
    with pytest.raises(sema.Busy):
        client.acquire_all([a.name, (b.name, 2)], timeout=0)
    assert b.state().held == 0  # nothing was taken on b
    with pytest.raises(sema.Timeout):
        client.acquire_all({a.name: 1, b.name: 1}, timeout=0.2)
    assert idle(b)
    held.release()
    assert idle(a)


def test_acquire_all_waits_in_every_line_and_is_granted_on_release(client, name):
    a, b = make(client, name + "/a", 1), make(client, name + "/b", 1)
    held = b.acquire()
    got = []
    t = threading.Thread(target=lambda: got.append(client.acquire_all([a.name, b.name],
                                                                      timeout=30)))
    t.start()
    try:
        wait_until(lambda: a.state().waiting == 1 and b.state().waiting == 1,
                   what="the request parked in both lines")
        assert a.state().held == 0  # it holds nothing on a while it waits for b
        held.release()
        t.join(30)
        assert len(got) == 1 and set(got[0].fences) == {a.name, b.name}
    finally:
        t.join(30)
    got[0].release()
    assert idle(a) and idle(b)


def test_acquire_all_errors(client, name):
    a = make(client, name + "/a", 1)
    with pytest.raises(sema.NotFound):
        client.acquire_all([a.name, name + "/none"], timeout=0)
    with pytest.raises(sema.TooHeavy):
        client.acquire_all({a.name: 2}, timeout=0)
    with pytest.raises(sema.InvalidRequest):
        client.acquire_all([a.name, a.name], timeout=0)  # named twice: semad says 400
    for bad in ({}, [], [("x", 0)], [3], {a.name: "2"}):
        with pytest.raises(ValueError):
            client.acquire_all(bad)
    assert idle(a)


def test_a_tenant_never_holds_more_than_tenant_max(client, name):
    sem = make(client, name, 3, tenant_max=1)
    p = sem.acquire(tenant="acme")
    assert p.tenant == "acme"
    with pytest.raises(sema.Busy):  # acme is at its cap: the free units are not its
        sem.acquire(tenant="acme", timeout=0)
    q = sem.try_acquire(tenant="globex")
    assert q is not None
    st = sem.state()
    assert st.tenant_max == 1 and st.held == 2, st
    assert {t.tenant: t.held for t in st.tenants} == {"acme": 1, "globex": 1}, st
    assert {h.tenant for h in st.holders} == {"acme", "globex"}
    with client.permit_all({sem.name: 1}, tenant="initech") as r:
        assert r.tenant == "initech"
    p.release()
    q.release()
    assert idle(sem)
    with pytest.raises(ValueError):
        sem.acquire(tenant="")


def test_limits_on_create_and_configure(client, name):
    sem = make(client, name, 4, rate_per_s=1000, rate_burst=5)
    assert sem.create(4, rate_per_s=1000, rate_burst=5) is False  # the same: nothing new
    with pytest.raises(sema.Conflict):
        sem.create(4, rate_per_s=10)
    st = sem.state()
    assert (st.rate_per_s, st.rate_burst, st.tenant_max) == (1000, 5, None), st
    assert st.tokens is not None and 0 <= st.tokens <= 5
    st = sem.configure(tenant_max=2)
    assert (st.capacity, st.tenant_max, st.rate_per_s) == (4, 2, 1000), st
    st = sem.configure(6, rate_per_s=0)  # 0 removes the rate
    assert (st.capacity, st.tenant_max, st.rate_per_s, st.rate_burst) == (6, 2, None, None)
    with pytest.raises(ValueError):
        sem.configure()
    with pytest.raises(ValueError):
        sem.configure(tenant_max=-1)


def test_a_ticket_names_its_tenant(client, name):
    sem = make(client, name, 1, tenant_max=1)
    t = sem.take_ticket(tenant="acme")
    assert t.status == "granted" and t.lease is not None and t.lease.tenant == "acme"
    assert t.tenant == t.state.tenant == "acme" and t.parts is None
    w = sem.take_ticket(tenant="globex")  # waiting: its reply names the tenant too
    assert (w.status, w.tenant, w.position) == ("waiting", "globex", 1), w.state
    assert client.ticket(w.id).tenant == "globex"
    u = sem.take_ticket()
    assert u.tenant is None and u.status == "waiting"
    u.leave()
    t.leave()
    permit = w.wait_turn(timeout=30)
    assert permit.tenant == "globex" and w.tenant == "globex"
    permit.release()
    assert idle(sem)


def test_a_ticket_on_several_semaphores_keeps_a_place_in_every_line(client, name):
    a, b = make(client, name + "/a", 2), make(client, name + "/b", 1)
    held = b.acquire()
    t = client.take_ticket_all({a.name: 2, b.name: 1}, owner="tab-3", tenant="acme",
                               keepalive=30)
    assert t.status == "waiting" and t.lease is None, t.state
    assert [(p.name, p.weight) for p in t.parts] == [(a.name, 2), (b.name, 1)]
    assert (t.name, t.state.weight) == (a.name, 2)  # the first part's
    assert t.state.weights == {a.name: 2, b.name: 1} and t.tenant == "acme"
    assert t.position == 1 and t.state.ahead_weight == 0, t.state  # next on b
    assert a.state().held == 0  # it holds nothing while it waits for b
    assert [(x.kind, x.multi) for x in a.state().waiters] == [("ticket", True)]
    again = client.ticket(t.id)
    assert again.parts == t.parts and again.tenant == "acme"
    held.release()
    with t.wait_turn(timeout=30) as p:
        assert p.fences == {a.name: p.parts[0].fence, b.name: p.parts[1].fence}
        assert [(x.name, x.weight) for x in p.parts] == [(a.name, 2), (b.name, 1)]
        assert (p.owner, p.tenant) == ("tab-3", "acme")
        assert t.status == "granted" and t.lease is not None and t.parts == again.parts
        assert a.state().held == 2 and b.state().held == 1
    assert idle(a) and idle(b)


def test_a_ticket_on_several_semaphores_granted_at_once_and_left(client, name):
    a, b = make(client, name + "/a", 1), make(client, name + "/b", 1)
    t = client.take_ticket_all([a.name, b.name])
    assert t.status == "granted" and t.position is None and t.tenant is None, t.state
    assert t.lease is not None and set(t.lease.fences) == {a.name, b.name}
    assert t.state.weights == {a.name: 1, b.name: 1}
    assert a.state().held == 1 and b.state().held == 1
    t.leave()  # its lease is released: both come back
    assert idle(a) and idle(b)
    with pytest.raises(sema.NotFound):
        client.take_ticket_all([a.name, name + "/none"])
    with pytest.raises(sema.TooHeavy):
        client.take_ticket_all({a.name: 2, b.name: 1})
    with pytest.raises(sema.InvalidRequest):
        client.take_ticket_all([a.name, a.name])  # named twice: semad says 400
    for bad in ({}, [], [("x", 0)], [3]):
        with pytest.raises(ValueError):
            client.take_ticket_all(bad)
    assert idle(a) and idle(b)


def test_async_acquire_all_and_tenants(url, client, name):
    a, b = make(client, name + "/a", 2, tenant_max=1), make(client, name + "/b", 1)

    async def main():
        async with sema.AsyncClient(url) as ac:
            async with ac.permit_all({a.name: 1, b.name: 1}, tenant="acme") as p:
                assert p.tenant == "acme" and set(p.fences) == {a.name, b.name}
                with pytest.raises(sema.Busy):  # acme's cap on a
                    await ac.semaphore(a.name).acquire(tenant="acme", timeout=0)
                other = await ac.semaphore(a.name).acquire(tenant="globex", timeout=0)
                await other.release()
            # waits in both lines; granted when b comes back
            held = await ac.semaphore(b.name).acquire()
            task = asyncio.ensure_future(ac.acquire_all([a.name, b.name], timeout=30))

            async def parked():
                return (await ac.semaphore(b.name).state()).waiting == 1

            await await_until(parked, what="the request parked on b")
            await held.release()
            got = await asyncio.wait_for(task, 30)
            assert set(got.fences) == {a.name, b.name}
            await got.release()
            # a ticket on both, waiting behind b's holder, then granted one lease
            held = await ac.semaphore(b.name).acquire()
            t = await ac.take_ticket_all({a.name: 1, b.name: 1}, tenant="acme")
            assert (t.status, t.tenant, t.position) == ("waiting", "acme", 1), t.state
            assert t.state.weights == {a.name: 1, b.name: 1}
            await held.release()
            got = await t.wait_turn(timeout=30)
            assert set(got.fences) == {a.name, b.name} and got.tenant == "acme"
            assert [p.name for p in (t.parts or ())] == [a.name, b.name]
            await got.release()
            st = await ac.semaphore(a.name).configure(tenant_max=0)
            assert st.tenant_max is None

    asyncio.run(main())
    assert idle(a) and idle(b)
