# SPDX-License-Identifier: MIT
"""test_client.py - sema.Client against a real semad: every method of the synchronous
client, its context managers under exceptions, cancellation from another thread,
map_limit's order and fail-fast, event streams and their resume, tickets, the legacy API,
and what reaches the wire (names encoded once, no request for a handle)."""
import asyncio
import os
import signal
import threading
import time

import pytest

import sema
from sema import events
from conftest import REDIS, SLOW, idle, urls, wait_until


def test_create_state_resize_delete(client, name):
    sem = client.semaphore(name)
    assert sem.create(3) is True
    assert sem.create(3) is False  # the same capacity again: no error
    with pytest.raises(sema.Conflict) as e:
        sem.create(4)
    assert e.value.code == "conflict" and e.value.status == 409 and e.value.detail
    st = sem.state()
    assert (st.name, st.capacity, st.available, st.held, st.waiting) == (name, 3, 3, 0, 0)
    assert sem.resize(5).capacity == 5
    sem.delete()
    with pytest.raises(sema.NotFound) as e:
        sem.state()
    assert e.value.code == "not_found" and isinstance(e.value, LookupError)
    with pytest.raises(sema.NotFound):
        sem.delete()


def test_a_handle_sends_nothing(server, url):
    before = fx_requests(server)
    c = sema.Client(url)
    c.semaphore("never-made")
    c.lock("never-locked")
    assert fx_requests(server) == before, "semaphore(name) and lock(key) must send nothing"
    c.close()


def fx_requests(server):
    """How many requests the semad instances behind ``server`` counted, /metrics aside."""
    total = 0
    for s in server.live() if hasattr(server, "live") else [server]:
        text = s.request("GET", "/metrics")[2].decode()
        for line in text.splitlines():
            if line.startswith("semad_http_requests_total{") and 'route="/metrics"' not in line:
                total += int(float(line.rsplit(" ", 1)[1]))
    return total


def test_acquire_release_and_the_permit(client, name):
    sem = client.semaphore(name)
    sem.create(3)
    t0 = time.time()
    p = sem.acquire(2, timeout=5, ttl=30, owner="worker-1")
    assert isinstance(p, sema.Permit)
    assert (p.name, p.weight, p.owner, p.ttl) == (name, 2, "worker-1", 30.0)
    assert p.lease and p.fence > 0
    assert t0 + 25 < p.expires_at < time.time() + 35
    assert not p.lost.is_set() and not p.released
    st = sem.state()
    assert st.held == 2 and st.available == 1 and st.fence == p.fence
    assert [(h.lease, h.weight, h.owner) for h in st.holders] == [(p.lease, 2, "worker-1")]
    q = sem.acquire()
    assert q.fence > p.fence, "fences increase"
    p.release()
    p.release()  # twice: nothing more
    q.release()
    assert p.released and idle(sem)
    with pytest.raises(sema.LeaseLost) as e:
        client.lease(p.lease)
    assert e.value.code == "lease_released"


def test_timeouts_tries_and_weights(client, name):
    sem = client.semaphore(name)
    sem.create(2)
    held = sem.acquire(2)
    t0 = time.monotonic()
    with pytest.raises(sema.Timeout) as e:
        sem.acquire(1, timeout=0.2)
    assert e.value.code == "timeout" and isinstance(e.value, TimeoutError)
    assert time.monotonic() - t0 >= 0.19
    with pytest.raises(sema.Busy) as e:
        sem.acquire(1, timeout=0)
    assert e.value.code == "unavailable"
    assert sem.try_acquire() is None
    with pytest.raises(sema.TooHeavy) as e:
        sem.acquire(3)
    assert e.value.status == 400 and isinstance(e.value, ValueError)
    with pytest.raises(ValueError):
        sem.acquire(0)  # refused before sending
    with pytest.raises(ValueError):
        sem.acquire(1, ttl=0)
    held.release()
    p = sem.try_acquire(2)
    assert p is not None and p.weight == 2
    p.release()
    with pytest.raises(sema.NotFound):
        client.semaphore(name + "-missing").acquire()


def test_fifo_a_try_never_jumps_a_waiter(client, name):
    sem = client.semaphore(name)
    sem.create(3)
    first = sem.acquire(2)
    got = []
    waiter = threading.Thread(target=lambda: got.append(sem.acquire(2, timeout=10)))
    waiter.start()
    wait_until(lambda: sem.state().waiting == 1, what="the waiter to queue")
    assert sem.try_acquire(1) is None, "one unit is free, but a heavier waiter is ahead"
    first.release()
    waiter.join(10)
    assert got and got[0].weight == 2
    got[0].release()
    assert idle(sem)


def test_permit_context_releases_on_exceptions(client, name):
    sem = client.semaphore(name)
    sem.create(2)
    with sem.permit(2, timeout=5) as p:
        assert sem.state().held == 2 and isinstance(p, sema.Permit)
    assert idle(sem) and p.released
    with pytest.raises(ZeroDivisionError):
        with sem.permit(1):
            1 / 0
    assert idle(sem)
    with pytest.raises(KeyError):
        with sem.acquire(1) as q:  # a Permit is a context manager itself
            raise KeyError("x")
    assert q.released and idle(sem)


def test_weighted_release_n(client, name):
    sem = client.semaphore(name)
    sem.create(5)
    a, b = sem.acquire(2), sem.acquire(1)
    sem.release(2)
    assert a.released and not b.released
    with pytest.raises(sema.Overflow):
        sem.release(2)
    sem.release(1)
    assert idle(sem)


def test_wait_idle(client, name):
    sem = client.semaphore(name)
    sem.create(2)
    sem.wait_idle(timeout=1)  # idle now
    p = sem.acquire(1)
    with pytest.raises(sema.Timeout):
        sem.wait_idle(timeout=0.2)
    done = threading.Event()
    t = threading.Thread(target=lambda: (sem.wait_idle(timeout=10), done.set()))
    t.start()
    wait_until(lambda: sem.state().waiting == 1, what="wait_idle to queue")
    assert not done.is_set()
    p.release()
    t.join(10)
    assert done.is_set()


def test_cancel_from_another_thread_leaves_nothing(client, name):
    sem = client.semaphore(name)
    sem.create(1)
    held = sem.acquire()
    cancel = sema.Cancel()
    errors = []

    def wait():
        try:
            sem.acquire(cancel=cancel)
        except sema.Cancelled as e:
            errors.append(e)

    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: sem.state().waiting == 1, what="the acquire to park")
    t0 = time.monotonic()
    cancel.set()
    t.join(5)
    assert errors and errors[0].code == "cancelled" and time.monotonic() - t0 < 2
    wait_until(lambda: sem.state().waiting == 0, what="semad to drop the waiter")
    held.release()
    wait_until(lambda: idle(sem), what="nothing held")
    with pytest.raises(sema.Cancelled):
        sem.acquire(cancel=cancel)  # already set: not even sent


def test_ctrl_c_while_waiting_leaves_nothing(client, name):
    """A KeyboardInterrupt in the waiting thread closes the request as a cancel does."""
    sem = client.semaphore(name)
    sem.create(1)
    held = sem.acquire()
    assert threading.current_thread() is threading.main_thread()

    def interrupt():
        wait_until(lambda: sem.state().waiting == 1, what="the acquire to park")
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    t = threading.Thread(target=interrupt)
    t.start()
    with pytest.raises(KeyboardInterrupt):
        sem.acquire()
    t.join(10)
    wait_until(lambda: sem.state().waiting == 0, what="semad to drop the waiter")
    held.release()
    wait_until(lambda: idle(sem), what="nothing held")


def test_deleted_while_waiting(client, name):
    sem = client.semaphore(name)
    sem.create(1)
    held = sem.acquire()
    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(
        sema.SemaphoreDeleted, sem.acquire, timeout=10)))
    t.start()
    wait_until(lambda: sem.state().waiting == 1, what="the waiter")
    sem.delete()
    t.join(10)
    assert errors and errors[0].value.code == "deleted"
    wait_until(lambda: held.lost.is_set(), timeout=held.ttl, what="the permit to be lost")
    with pytest.raises(sema.LeaseLost) as e:
        held.release()
    assert e.value.code in ("deleted", "not_found")


def test_revoke_is_noticed_and_release_raises(client, name):
    sem = client.semaphore(name)
    sem.create(1)
    p = sem.acquire(ttl=1.5)
    client.revoke(p.lease)
    assert p.lost.wait(3), "lost within ttl/3 of the revoke"
    assert p.error.code == "lease_revoked" and isinstance(p.error, sema.Gone)
    with pytest.raises(sema.LeaseLost):
        p.release()
    p.release()  # again: nothing
    with sema.Client(client.url) as other:
        q = other.semaphore(name).acquire(timeout=5)
        assert q.fence > p.fence
        q.release()


def test_renewals_keep_a_short_lease(client, name):
    sem = client.semaphore(name)
    sem.create(1)
    with sem.permit(ttl=2) as p:
        first = p.expires_at
        wait_until(lambda: p.expires_at > first + 0.5, timeout=4, what="a renewal")
        time.sleep(2.2)  # past the original ttl: only renewals keep it
        assert not p.lost.is_set(), p.error
        assert client.lease(p.lease).lease == p.lease
        p.renew(5)  # by hand
        assert p.ttl == 5
    assert idle(sem)


def test_keyed_locks(client, name):
    lock = client.lock(name)
    with pytest.raises(sema.NotFound):
        lock.state()
    with lock.read(timeout=5) as r1, lock.read(timeout=5) as r2:
        assert (r1.mode, r1.key) == ("shared", name) and r2.mode == "shared"
        st = lock.state()
        assert st.readers == 2 and {h.mode for h in st.holders} == {"shared"}
        assert lock.try_acquire("exclusive") is None
        with pytest.raises(sema.Timeout):
            with lock.write(timeout=0.1):
                pass
    with lock.write(timeout=5) as w:
        assert w.mode == "exclusive"
        assert lock.try_acquire("shared") is None
    with pytest.raises(ValueError):
        lock.acquire("both")
    with pytest.raises(sema.NotFound):
        lock.state()  # a key exists only while held or awaited


def test_map_limit_in_order_and_bounded(client, name):
    sem = client.semaphore(name)
    sem.create(10)
    running, most = [0], [0]
    lock = threading.Lock()

    def work(x):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return x * x

    assert sem.map_limit(range(12), 3, work) == [x * x for x in range(12)]
    assert 1 <= most[0] <= 3
    assert sem.map_limit(iter([]), 2, work) == []
    assert idle(sem)


def test_map_limit_fails_fast(client, name):
    sem = client.semaphore(name)
    sem.create(1)  # one at a time fleet-wide, whatever the limit
    started = []

    def work(x):
        started.append(x)
        if x == 2:
            raise RuntimeError("item 2")
        return x

    with pytest.raises(RuntimeError, match="item 2"):
        sem.map_limit(range(100), 4, work)
    assert started[:3] == [0, 1, 2] and len(started) < 100
    wait_until(lambda: idle(sem), what="every unit back")


def watching(sem):
    """A thread collecting sem's events into the list returned, once the stream is open
    (semad counts it as a subscriber: the first event, of a unit taken and given back, came)."""
    seen = []
    stream = sem.watch()
    reader = threading.Thread(target=lambda: seen.extend(stream))
    reader.start()
    deadline = time.monotonic() + 5 * SLOW
    while not seen and time.monotonic() < deadline:
        sem.acquire().release()
        time.sleep(0.05)
    return reader, seen


def test_watch_events_and_resume(client, name):
    sem = client.semaphore(name)
    sem.create(2)
    reader, seen = watching(sem)
    p = sem.acquire(2)
    p.release()
    sem.resize(3)
    sem.delete()
    reader.join(10)
    assert not reader.is_alive(), "the stream ends after deleted"
    kinds = [type(e) for e in seen]
    assert kinds[-4:] == [events.Granted, events.Released, events.Resized, events.Deleted]
    g = seen[-4]
    assert (g.lease, g.weight, g.fence, g.name) == (p.lease, 2, p.fence, name)
    assert seen[-2].capacity == 3 and all(e.id for e in seen)
    assert seen[-1].missed is False


def test_watch_queued_and_left(client, name):
    sem = client.semaphore(name)
    sem.create(1)
    reader, seen = watching(sem)
    held = sem.acquire()
    ticket = sem.take_ticket(owner="in-line")
    wait_until(lambda: any(isinstance(e, events.Queued) for e in seen), what="queued")
    ticket.leave()
    wait_until(lambda: any(isinstance(e, events.Left) for e in seen), what="left")
    held.release()
    sem.delete()
    reader.join(10)
    q = next(e for e in seen if isinstance(e, events.Queued))
    left = next(e for e in seen if isinstance(e, events.Left))
    assert (q.owner, q.weight, q.kind, q.waiting, q.waiting_weight) == ("in-line", 1, "ticket",
                                                                        1, 1), q
    assert (left.owner, left.waiting, left.waiting_weight) == ("in-line", 0, 0), left
    assert q.since > 0 and left.since == q.since and q.name == name


def test_watch_resumes_from_an_event_id(client, name):
    sem = client.semaphore(name)
    sem.create(1)
    first = []
    with sem.watch() as stream:
        t = threading.Thread(target=lambda: first.append(next(stream)))
        t.start()
        while t.is_alive():
            sem.acquire().release()
            t.join(0.05)
    mark = first[0].id
    p = sem.acquire()
    p.release()
    with sem.watch(last_event_id=mark) as stream:  # what came after the mark, then live
        got = []
        for e in stream:
            got.append(e)
            if isinstance(e, events.Released) and e.lease == p.lease:
                break
    assert [type(e) for e in got][-2:] == [events.Granted, events.Released]
    assert got[-2].lease == p.lease and mark not in [e.id for e in got]


def test_watch_close_from_another_thread(client, name):
    sem = client.semaphore(name)
    sem.create(1)
    stream = sem.watch()
    out = []
    t = threading.Thread(target=lambda: out.extend(stream))
    t.start()
    time.sleep(0.1)
    stream.close()
    t.join(5)
    assert not t.is_alive()
    with pytest.raises(sema.NotFound):
        list(client.watch(name + "-missing"))


def test_tickets(client, name):
    sem = client.semaphore(name)
    sem.create(1)
    held = sem.acquire()
    t1 = sem.take_ticket(owner="tab-1", keepalive=30)
    t2 = sem.take_ticket(owner="tab-2")
    assert (t1.status, t1.position, t2.position) == ("waiting", 1, 2)
    assert t2.state.ahead_weight == 1 and t2.state.keepalive == 30
    again = client.ticket(t2.id)  # read back by id, as from a cookie
    assert again.position == 2 and again.refresh().status == "waiting"
    t0 = time.monotonic()
    assert again.refresh(wait=0.3).position == 2  # a long poll: nothing moved meanwhile
    assert time.monotonic() - t0 >= 0.25
    positions = []
    done = []
    waiter = threading.Thread(target=lambda: done.append(
        t2.wait_turn(timeout=20, on_update=lambda st: positions.append(st.position))))
    waiter.start()
    held.release()
    p1 = t1.wait_turn(timeout=10)
    assert p1.weight == 1 and p1.name == name
    # positions change at most once per --ticket-poll: wait for t2's to be seen
    wait_until(lambda: positions == [1], timeout=5, what="t2 to move up (%r)" % positions)
    assert t2.position == 1 and not done
    p1.release()
    waiter.join(20)
    assert done and positions == [1], positions
    done[0].release()
    t1.leave()  # it ended with its lease: nothing
    with pytest.raises(sema.TicketEnded):
        t2.refresh()
    assert idle(sem)


def test_ticket_updates_and_leave(client, name):
    sem = client.semaphore(name)
    sem.create(1)
    held = sem.acquire()
    t = sem.take_ticket()
    states = []
    with t.updates() as ups:
        for st in ups:
            states.append(st)
            if len(states) == 1:
                assert st.status == "waiting" and st.position == 1 and st.event_id
                held.release()
    assert states[-1].status == "granted" and states[-1].lease is not None
    assert t.status == "granted"
    p = t.wait_turn()  # already granted: no request needed
    assert p.lease == states[-1].lease.lease
    p.release()
    t2 = sem.take_ticket()
    assert t2.status == "granted"  # it fit at once
    t2.leave()  # releases its lease
    wait_until(lambda: idle(sem), what="the ticket's lease released")
    held = sem.acquire()
    t3 = sem.take_ticket()
    t3.leave()
    with pytest.raises(sema.TicketEnded):
        list(t3.updates())
    with pytest.raises(sema.Timeout):
        sem.take_ticket().wait_turn(timeout=0.2)
    held.release()


def test_legacy_api(client, name):
    lg = client.legacy
    assert lg.create(name, 1) is True
    assert lg.create(name, 5) is False
    assert lg.down(name) == 0
    assert lg.down(name) is None
    assert lg.up(name) == 1
    assert lg.value(name) == 1
    assert lg.delete(name) is True
    assert lg.delete(name) is False
    with pytest.raises(sema.NotFound):
        lg.value(name)


def test_idempotency_key_gives_the_same_lease(client, name):
    sem = client.semaphore(name)
    sem.create(2)
    key = "job-42-" + name.encode().hex()
    p = sem.acquire(idempotency_key=key)
    q = sem.acquire(idempotency_key=key)
    assert q.lease == p.lease and sem.state().held == 1
    with pytest.raises(sema.InvalidRequest) as e:
        sem.acquire(2, idempotency_key=key)  # the key names a lease of another weight
    assert e.value.code == "idempotency_key_mismatch"
    p.release()
    with pytest.raises(sema.LeaseLost) as e:
        q.release()  # the same lease: already released through p
    assert e.value.code == "lease_released"
    with pytest.raises(ValueError):
        sem.acquire(idempotency_key="two\nlines")


def test_strings_that_are_not_utf8_fail_before_anything_is_sent(server, url, client, name):
    """A str with a lone surrogate (what os.environ and sys.argv make of bytes that are not
    UTF-8) as a name, owner, tenant or idempotency key is a ValueError naming it, in the
    synchronous and the asyncio client, and nothing reaches semad."""
    cut = "caf\udcc3"
    sem = client.semaphore(name)
    sem.create(1)
    before = fx_requests(server)
    calls = [
        ("tenant", lambda: sem.acquire(timeout=0, tenant=cut)),
        ("owner", lambda: sem.acquire(timeout=0, owner=cut)),
        ("idempotency_key", lambda: sem.acquire(timeout=0, idempotency_key=cut)),
        ("idempotency_key", lambda: sem.acquire(timeout=0, idempotency_key="a\tb")),
        ("name", lambda: client.semaphore(cut)),
        ("key", lambda: client.lock(cut)),
        ("owner", lambda: client.lock(name).acquire("shared", timeout=0, owner=cut)),
        ("tenant", lambda: sem.take_ticket(tenant=cut)),
        ("owner", lambda: sem.take_ticket(owner=cut)),
        ("idempotency_key", lambda: sem.take_ticket(idempotency_key=cut)),
        ("tenant", lambda: client.acquire_all([name, name + "/b"], timeout=0, tenant=cut)),
        ("name", lambda: client.acquire_all([name, cut], timeout=0)),
        ("owner", lambda: client.take_ticket_all([name, name + "/b"], owner=cut)),
        ("name", lambda: client.take_ticket_all({cut: 1})),
        ("owner", lambda: sema.Client(url, owner=cut)),
    ]
    for what, call in calls:
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value).startswith(what + " must be"), (what, e.value)

    async def in_asyncio():
        async with sema.AsyncClient(url) as ac:
            with pytest.raises(ValueError, match="^tenant must be valid UTF-8"):
                await ac.semaphore(name).acquire(timeout=0, tenant=cut)
            with pytest.raises(ValueError, match="^owner must be valid UTF-8"):
                await ac.take_ticket_all([name, name + "/b"], owner=cut)

    asyncio.run(in_asyncio())
    assert fx_requests(server) == before, "not one of them may reach semad"
    # UTF-8 beyond ASCII goes through, each string where it belongs
    p = sem.acquire(timeout=0, owner="zoë", tenant="ünï", idempotency_key="clé")
    assert (p.owner, p.tenant) == ("zoë", "ünï")
    assert sem.acquire(timeout=0, tenant="ünï", idempotency_key="clé").lease == p.lease

    async def same_key():  # both transports send the key's UTF-8
        async with sema.AsyncClient(url) as ac:
            q = await ac.semaphore(name).acquire(timeout=0, tenant="ünï", idempotency_key="clé")
            assert q.lease == p.lease
            await q.release()

    asyncio.run(same_key())
    assert idle(sem)


def test_client_options(url, monkeypatch):
    monkeypatch.setenv("SEMA_SERVER", url)
    c = sema.Client()
    assert c.url == url
    c.close()
    # a bare host:port is http://, as for the sema command and curl
    assert sema.Client("127.0.0.1:7070").url == "http://127.0.0.1:7070"
    monkeypatch.setenv("SEMA_SERVER", url.replace("http://", ""))
    with sema.Client() as bare:
        assert bare.url == url
    with pytest.raises(ValueError, match="http:// or https://"):
        sema.Client("ftp://127.0.0.1:7070")
    monkeypatch.setenv("SEMA_SERVER", "gopher://localhost:7070")
    with pytest.raises(ValueError, match="SEMA_SERVER"):
        sema.Client()
    with pytest.raises(ValueError, match="token"):
        sema.Client(url, token="two words")
    with pytest.raises(ValueError):
        sema.Client(url).semaphore("")


def test_no_semad_is_a_network_error():
    c = sema.Client("http://127.0.0.1:1", retry=0.3)
    t0 = time.monotonic()
    with pytest.raises(sema.NetworkError) as e:
        c.semaphore("x").state()
    assert isinstance(e.value, ConnectionError) and isinstance(e.value, sema.Unavailable)
    assert 0.09 < time.monotonic() - t0 < 3  # retried within the budget, then raised
    with pytest.raises(sema.NetworkError):
        c.semaphore("x").acquire()


@pytest.mark.skipif(REDIS < 3, reason="needs three semad instances on one Redis")
def test_across_instances(server, name):
    a, b, c = (sema.Client(u) for u in urls(server)[:3])
    a.semaphore(name).create(1)
    p = a.semaphore(name).acquire()
    got = []
    t = threading.Thread(target=lambda: got.append(c.semaphore(name).acquire(timeout=10)))
    t.start()
    wait_until(lambda: b.semaphore(name).state().waiting == 1, what="the waiter on C")
    p.release()
    t.join(10)
    assert got
    ticket = b.semaphore(name).take_ticket()
    got[0].release()
    q = a.ticket(ticket.id).wait_turn(timeout=10)  # taken on B, collected on A
    q.release()
    for x in (a, b, c):
        x.close()
    assert idle(sema.Client(urls(server)[1]).semaphore(name))


if __name__ == "__main__":
    raise SystemExit(pytest.main([os.path.abspath(__file__)]))
