# SPDX-License-Identifier: MIT
"""conftest.py - the Python client's tests run against a real semad started by the
project's fixture (tests/integration/semad_fixture.py): on an ephemeral loopback port,
or with SEMA_TEST_REDIS=N a fresh redis-server with N semad instances on it. The client
under test is the source tree's (clients/python/src), whatever interpreter runs pytest."""
import asyncio
import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("SEMA_SOURCE_DIR") or os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))

import semad_fixture as fx  # noqa: E402

import sema  # noqa: E402

SLOW = fx.SLOW
REDIS = int(os.environ.get("SEMA_TEST_REDIS", "0") or "0")


def start(*args, **kw):
    """A semad (or, under SEMA_TEST_REDIS, a fleet on a fresh Redis); skips where it cannot
    run here (no Redis back end)."""
    try:
        return fx.Semad(*args, **kw)
    except fx.Skip as e:
        pytest.skip(str(e))


def urls(s):
    """The base URL of every semad behind ``s``."""
    if hasattr(s, "live"):
        return [i.url("") for i in s.live()]
    return [s.url("")]


@pytest.fixture(scope="module")
def server():
    s = start()
    with s:
        yield s


@pytest.fixture
def url(server):
    return urls(server)[0]


@pytest.fixture
def client(url):
    c = sema.Client(url)
    yield c
    c.close()


@pytest.fixture
def name(request):
    """A semaphore name of this test's own (with a slash and non-ASCII, to exercise the
    path's encoding)."""
    return "t/%s-é" % request.node.name.replace("[", "-").replace("]", "")


def wait_until(pred, timeout=5.0, what="condition"):
    """A bounded wait for a condition (scaled in sanitizer builds)."""
    deadline = time.monotonic() + timeout * SLOW
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.01)


async def await_until(pred, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout * SLOW
    while True:
        v = await pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        await asyncio.sleep(0.01)


def idle(sem):
    """The semaphore holds nothing and nobody waits."""
    st = sem.state()
    return st.held == 0 and st.waiting == 0 and st.available == st.capacity
