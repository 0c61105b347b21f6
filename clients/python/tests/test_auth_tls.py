# SPDX-License-Identifier: MIT
"""test_auth_tls.py - the Python client on a semad with --auth and with TLS. Least
privilege: a token with the `acquire` right alone does a worker's whole work (acquire,
renew, release, permits, locks, wait_idle, tickets, map_limit, legacy up/down), through
both clients, with no `read` or `admin`; a `read` token follows state and events; each
refusal is the typed error naming the right. TLS: a private CA given as ``ca`` or
SEMA_CACERT, the hint when it is missing, and client certificates (also naming a token).
Tokens are made with `sema token new`, certificates with `openssl`, as an operator would."""
import asyncio
import os
import threading
import time

import pytest

import sema
from conftest import SLOW, start, wait_until

from test_auth import Tokens, new_token  # tests/integration
from test_tls import client_ctx, server_setup, tls_args


def test_an_acquire_token_does_a_workers_work(request):
    t = Tokens()
    name = "jobs/" + request.node.name
    with start("--auth", t.path) as s:
        url = s.url("")
        with sema.Client(url, token=t.admin) as admin:
            admin.semaphore(name).create(2)
        w = sema.Client(url, token=t.acquire)
        sem = w.semaphore(name)
        p = sem.acquire(ttl=1.5)
        first = p.expires_at
        wait_until(lambda: p.expires_at > first + 0.2, timeout=3, what="a background renewal")
        p.renew()
        assert not p.lost.is_set(), p.error
        p.release()
        with sem.permit(2, timeout=5) as q:
            assert q.weight == 2
        sem.try_acquire().release()
        sem.wait_idle(timeout=5)
        with w.lock(name).read(timeout=5), w.lock(name).read(timeout=5):
            pass
        with w.lock(name).write(timeout=5):
            pass
        assert sem.map_limit([1, 2, 3], 2, lambda x: -x) == [-1, -2, -3]
        held = sem.acquire(2)
        ticket = sem.take_ticket(keepalive=30)
        assert ticket.refresh().position == 1
        assert w.ticket(ticket.id).id == ticket.id
        states = []
        with ticket.updates() as ups:
            for st in ups:
                states.append(st.status)
                if len(states) == 1:
                    held.release()
        assert states == ["waiting", "granted"]
        ticket.wait_turn().release()
        sem.take_ticket().leave()
        assert w.legacy.down(name) == 1 and w.legacy.up(name) == 2
        # what an acquire token may not do: each refusal names the right it lacks
        for call, right in ((sem.state, "read"), (lambda: sem.create(2), "admin"),
                            (lambda: sem.resize(3), "admin"), (sem.delete, "admin"),
                            (lambda: list(sem.watch()), "read"),
                            (lambda: w.lock(name).state(), "read")):
            with pytest.raises(sema.Forbidden) as e:
                call()
            assert e.value.status == 403 and "'%s'" % right in e.value.detail, e.value.detail
        w.close()

        async def worker():
            async with sema.AsyncClient(url, token=t.acquire) as aw:
                asem = aw.semaphore(name)
                async with asem.permit(2, timeout=5):
                    pass
                ap = await asem.acquire(ttl=1.5)
                await ap.renew()
                await ap.release()
                async with aw.lock(name).write():
                    pass
                await asem.wait_idle(timeout=5)
                assert await asem.map_limit([1, 2], 2, _double) == [2, 4]
                with pytest.raises(sema.Forbidden):
                    await asem.state()

        asyncio.run(asyncio.wait_for(worker(), 60 * SLOW))


async def _double(x):
    return 2 * x


def test_read_token_and_refusals(request):
    t = Tokens()
    name = request.node.name
    with start("--auth", t.path) as s:
        url = s.url("")
        admin = sema.Client(url, token=t.admin)
        admin.semaphore(name).create(1)
        held = admin.semaphore(name).acquire()
        r = sema.Client(url, token=t.read)
        st = r.semaphore(name).state()
        assert st.held == 1 and st.holders[0].lease == held.lease
        assert r.lease(held.lease).fence == held.fence
        seen = []
        stream = r.watch(name)
        reader = threading.Thread(target=lambda: seen.extend(stream))
        reader.start()
        deadline = time.monotonic() + 5 * SLOW
        while not seen and time.monotonic() < deadline:
            admin.semaphore(name).resize(2)
            admin.semaphore(name).resize(1)
            time.sleep(0.05)
        stream.close()
        reader.join(5)
        assert seen and isinstance(seen[0], sema.events.Resized)
        with pytest.raises(sema.Forbidden) as e:
            r.semaphore(name).acquire()
        assert "'acquire'" in e.value.detail
        with pytest.raises(sema.Unauthorized) as e:
            sema.Client(url, token="").semaphore(name).state()
        assert e.value.status == 401 and isinstance(e.value, PermissionError)
        with pytest.raises(sema.Unauthorized):
            sema.Client(url, token="sema_" + "A" * 43).semaphore(name).state()
        # another token's lease: an acquire token cannot end it
        w = sema.Client(url, token=t.acquire)
        with pytest.raises(sema.Forbidden):
            w.revoke(held.lease)
        held.release()
        for c in (admin, r, w):
            c.close()


def test_token_from_the_environment(monkeypatch, request):
    t = Tokens()
    with start("--auth", t.path) as s:
        monkeypatch.setenv("SEMA_TOKEN", t.admin)
        c = sema.Client(s.url(""))
        assert c.semaphore(request.node.name).create(1) is True
        c.close()


def test_tls_with_a_private_ca(monkeypatch, request):
    certs = server_setup()
    name = request.node.name
    try:
        with start(*tls_args(certs), tls=client_ctx(certs)) as s:
            url = s.url("")
            assert url.startswith("https://")
            c = sema.Client(url, ca=certs.path("ca.pem"))
            sem = c.semaphore(name)
            sem.create(1)
            with sem.permit(ttl=1.5) as p:
                first = p.expires_at
                wait_until(lambda: p.expires_at > first, timeout=3, what="a renewal over TLS")
            c.close()

            async def over_tls():
                async with sema.AsyncClient(url, ca=certs.path("ca.pem")) as a:
                    seen = []

                    async def follow():
                        async for e in a.watch(name):
                            seen.append(e)
                            return

                    reader = asyncio.ensure_future(follow())
                    while not reader.done():  # until the stream is open and sees one
                        async with a.semaphore(name).permit():
                            pass
                        await asyncio.sleep(0.05)
                    assert isinstance(seen[0], sema.events.LeaseEvent)

            asyncio.run(asyncio.wait_for(over_tls(), 30 * SLOW))
            monkeypatch.setenv("SEMA_CACERT", certs.path("ca.pem"))
            with sema.Client(url) as env_client:
                env_client.semaphore(name).try_acquire().release()
            monkeypatch.delenv("SEMA_CACERT")
            t0 = time.monotonic()
            with pytest.raises(sema.NetworkError) as e:
                sema.Client(url).semaphore(name).state()
            assert e.value.code == "tls_untrusted" and "SEMA_CACERT" in str(e.value)
            assert e.value.detail == str(e.value), "the explanation is the detail too"
            assert time.monotonic() - t0 < 2, "a certificate error is not retried"
            with pytest.raises(sema.NetworkError) as e:
                asyncio.run(sema.AsyncClient(url).semaphore(name).state())
            assert e.value.code == "tls_untrusted"
            with pytest.raises(sema.InvalidRequest) as e:  # plain HTTP to the TLS port
                sema.Client(url.replace("https:", "http:")).semaphore(name).state()
            assert "https" in (e.value.detail or "")
            with pytest.raises(ValueError):
                sema.Client(url.replace("https:", "http:"), ca=certs.path("ca.pem"))
    finally:
        certs.close()


def test_client_certificates(monkeypatch, request):
    certs = server_setup()
    name = "jobs/" + request.node.name
    try:
        certs.ca("clients")
        certs.issue("boss", "clients", "ops", server=False)
        certs.issue("runner", "clients", "ci-runner", server=False)
        tokens = certs.path("tokens")
        new_token(tokens, "ops", "admin")
        new_token(tokens, "ci-runner", "acquire", "jobs/")
        args = tls_args(certs) + ["--tls-client-ca", certs.path("clients.pem"), "--auth", tokens]
        with start(*args, tls=client_ctx(certs, "boss")) as s:
            url = s.url("")
            ca = certs.path("ca.pem")
            with pytest.raises(sema.NetworkError) as e:
                sema.Client(url, ca=ca).semaphore(name).state()
            assert e.value.code == "tls_certificate_required" and not e.value.retryable
            assert e.value.detail == str(e.value) and "SEMA_CERT" in e.value.detail
            assert "cert=" in str(e.value) and "SEMA_CERT" in str(e.value), e.value
            with pytest.raises(ValueError, match="cannot be used"):
                sema.Client(url, ca=certs.path("no-such-ca.pem"))
            boss = sema.Client(url, ca=ca, cert=certs.path("boss.pem"),
                               key=certs.path("boss.key"), token="")
            boss.semaphore(name).create(1)  # the certificate's CN names the admin token
            monkeypatch.setenv("SEMA_CERT", certs.path("runner.pem"))
            monkeypatch.setenv("SEMA_CERT_KEY", certs.path("runner.key"))
            monkeypatch.delenv("SEMA_TOKEN", raising=False)
            runner = sema.Client(url, ca=ca)
            with runner.semaphore(name).permit(timeout=5):
                pass
            with pytest.raises(sema.Forbidden):
                runner.semaphore("other").acquire()  # outside the token's prefix
            boss.close()
            runner.close()
    finally:
        certs.close()


if __name__ == "__main__":
    raise SystemExit(pytest.main([os.path.abspath(__file__)]))
