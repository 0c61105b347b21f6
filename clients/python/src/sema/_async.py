# SPDX-License-Identifier: MIT
"""_async.py - the asyncio client: the same flows as the synchronous one, run on asyncio
streams; a cancelled call closes its connection (semad drops the waiter) and releases a
grant whose reply it did not read; permits renewed by timers of the event loop."""
from __future__ import annotations

import asyncio
import ssl
import time
from types import TracebackType
from typing import (Any, AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable,
                    Dict, Generic, Iterable, List, Mapping, Optional, Set, Type, TypeVar,
                    Union)

from . import _flows as fl
from ._ahttp import AsyncHttp
from ._common import PermitFields, TicketFields, ticket_permit, unreachable
from ._options import Options
from ._schedule import Schedule
from ._types import Lease, LockState, SemaphoreState, TicketState
from .errors import Busy, LeaseLost, Overflow, SemaError
from .events import Event

T = TypeVar("T")
R = TypeVar("R")


class _ARunner:
    """Runs flows on the event loop. A cancellation is thrown into the flow, and what the
    flow then does (the clean-up of an acquire) runs in a shielded task: a second cancel
    cannot cut it short."""

    def __init__(self, http: AsyncHttp) -> None:
        self.http = http
        self._cleanups: Set["asyncio.Task[Any]"] = set()

    async def _do(self, op: fl.Op, streams: List[fl.Stream]) -> Any:
        if type(op) is fl.Request:
            return await self.http.request(op)
        if type(op) is fl.Sleep:
            await asyncio.sleep(op.seconds)
            return None
        if type(op) is fl.OpenStream:
            stream = await self.http.open_stream(op)
            if stream.handle is not None:
                streams.append(stream)
            return stream
        if type(op) is fl.ReadLine:
            return await self.http.read_line(op.stream, op.timeout)
        if type(op) is fl.CloseStream:
            self.http.close_stream(op.stream)
            streams.remove(op.stream)
            return None
        raise TypeError("not an operation: %r" % (op,))

    async def run(self, flow: fl.Flow[T], emit: Optional[Callable[[Any], None]] = None,
                  error: Optional[BaseException] = None) -> T:
        streams: List[fl.Stream] = []
        value: Any = None
        try:
            while True:
                try:
                    op = flow.send(value) if error is None else flow.throw(error)
                except StopIteration as stop:
                    result: T = stop.value
                    return result
                value = error = None
                if type(op) is fl.Emit:
                    if emit is not None:
                        emit(op.value)
                    continue
                try:
                    if type(op) is fl.Request:  # every call's path: no coroutine of its own
                        value = await self.http.request(op)
                    else:
                        value = await self._do(op, streams)
                except asyncio.CancelledError as e:
                    task = asyncio.ensure_future(self.run(flow, emit, e))
                    self._cleanups.add(task)
                    task.add_done_callback(self._cleanups.discard)
                    return await asyncio.shield(task)
                except BaseException as e:  # thrown into the flow, which decides
                    error = e
        finally:
            for s in streams:
                self.http.close_stream(s)

    async def iterate(self, flow: fl.Flow[None]) -> AsyncGenerator[Any, None]:
        streams: List[fl.Stream] = []
        value: Any = None
        error: Optional[BaseException] = None
        try:
            while True:
                try:
                    op = flow.send(value) if error is None else flow.throw(error)
                except StopIteration:
                    return
                value = error = None
                if type(op) is fl.Emit:
                    yield op.value
                    continue
                try:
                    value = await self._do(op, streams)
                except asyncio.CancelledError:
                    raise
                except BaseException as e:
                    error = e
        finally:
            flow.close()
            for s in streams:
                self.http.close_stream(s)


class _ARenewer:
    """Renews an AsyncClient's permits: one Schedule and one timer of the event loop, set for
    the first entry due (a permit costs a push, not a timer of its own)."""

    def __init__(self) -> None:
        self._schedule = Schedule()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at = float("inf")

    def schedule(self, permit: AsyncPermit, at: float, gen: int) -> None:
        loop = permit._loop
        if loop is not self._loop:  # a new event loop: the old one's permits are gone
            self._schedule.clear()
            self._loop, self._timer, self._timer_at = loop, None, float("inf")
        self._schedule.push(permit, at, gen)
        if at < self._timer_at:
            self._arm(at)

    def dropped(self) -> None:
        if self._schedule.dropped():
            self._schedule.compact()

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        assert self._loop is not None
        self._timer = self._loop.call_at(at, self._fire)  # loop.time() is time.monotonic()
        self._timer_at = at

    def _fire(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        now = time.monotonic()
        while True:
            due = self._schedule.pop_due(now)
            if due is None:
                break
            due[0]._tick(due[1])
        at = self._schedule.next_at()
        if at is not None and at < self._timer_at:
            self._arm(at)


class AsyncPermit(PermitFields):
    """A held lease (see sema.Permit), renewed by a timer of the event loop every ttl/3;
    ``lost`` is an asyncio.Event. ``async with``: released when the block ends."""

    def __init__(self, client: AsyncClient, lease: Lease, sent: float,
                 on_end: Optional[Callable[[AsyncPermit], None]] = None,
                 left: Optional[float] = None) -> None:
        self._client = client
        self._deadline, first = self._fields(lease, sent, left)
        self._lost: Optional[asyncio.Event] = None  # made when first asked for
        self._on_end = on_end
        self._loop = asyncio.get_running_loop()
        self._task: Optional["asyncio.Task[None]"] = None
        self._schedule(first)
        client._permits[self] = None

    @property
    def lost(self) -> asyncio.Event:
        """Set when the lease is lost (never by release())."""
        if self._lost is None:
            self._lost = asyncio.Event()
            if self._error is not None:
                self._lost.set()
        return self._lost

    def _schedule(self, at: float) -> None:
        self._gen += 1
        self._client._renewer.schedule(self, min(at, self._deadline), self._gen)

    def _tick(self, gen: int) -> None:
        """A renewal (or the deadline) is due: from the renewer's timer."""
        if gen != self._gen or self._released or self._error is not None:
            return
        if time.monotonic() >= self._deadline:
            self._lose(unreachable(self.lease))
            return
        self._task = self._loop.create_task(self._renew_once(gen))

    async def _renew_once(self, gen: int) -> None:
        now = time.monotonic()
        timeout = min(self._client._o.config.request_timeout, max(0.05, self._deadline - now))
        try:
            lease = await self._client._run(fl.renew(self._client._o.config, self.lease,
                                                     round(self.ttl * 1000), timeout, fl.NEVER))
        except LeaseLost as e:
            self._lose(e)
            return
        except SemaError:  # no reply, a 503: again soon, until the deadline says lost
            if gen == self._gen and not self._released and self._error is None:
                self._schedule(time.monotonic() + min(self.ttl / 6, 1.0))
            return
        if gen == self._gen and not self._released and self._error is None:
            self._renewed(lease, now)

    def _renewed(self, lease: Lease, sent: float) -> None:
        self.expires_at, self.ttl = lease.expires_at, lease.ttl
        self._deadline = max(self._deadline, sent + lease.ttl)
        self._schedule(time.monotonic() + self.ttl / 3)

    def _lose(self, e: LeaseLost) -> None:
        if self._error is None and not self._released:
            self._error = e
            self._gen += 1
            self._client._renewer.dropped()
            if self._lost is not None:
                self._lost.set()

    async def renew(self, ttl: Optional[float] = None) -> None:
        """Renews now, for ``ttl`` seconds (default: the lease's); LeaseLost if it is gone."""
        ttl_ms = fl.to_ms(self.ttl if ttl is None else ttl, "ttl", 1)
        sent = time.monotonic()
        o = self._client._o.config
        try:
            lease = await self._client._run(fl.renew(o, self.lease, ttl_ms, o.request_timeout,
                                                     fl.NETWORK))
        except LeaseLost as e:
            self._lose(e)
            raise
        if not self._released and self._error is None:
            self._renewed(lease, sent)

    async def release(self) -> None:
        """Gives the units back; releasing again does nothing. Raises LeaseLost if the
        lease was lost before, or the error of a release that got no answer."""
        if self._released:
            return
        self._released = True
        self._gen += 1
        error = self._error
        if error is None:
            self._client._renewer.dropped()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._client._permits.pop(self, None)
        if self._on_end is not None:
            self._on_end(self)
        if error is not None and error.code != "unreachable":
            raise error
        try:
            await self._client._run(fl.release(self._client._o.config, self.lease))
        except LeaseLost as e:
            self._error = self._error or e
            self.lost.set()
            raise self._error from None
        except SemaError:
            if error is not None:  # lost already: that is the news, not the failed release
                raise error from None
            raise
        if error is not None:
            raise error

    async def __aenter__(self) -> AsyncPermit:
        return self

    async def __aexit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await _release_at_exit(self, et is None)


async def _release_at_exit(permit: AsyncPermit, clean: bool) -> None:
    """Releases at the end of an ``async with``. After the block raised (a cancellation
    included) the release runs shielded, and its own failure is not raised over the
    block's."""
    if clean:
        await permit.release()
        return
    try:
        await asyncio.shield(asyncio.ensure_future(permit.release()))
    except SemaError:
        pass


class AsyncPermitContext:
    """``async with sem.permit(2, timeout=5) as p:``: acquires on entry, releases on exit."""

    def __init__(self, acquire: Callable[[], Awaitable[AsyncPermit]]) -> None:
        self._acquire = acquire
        self._permit: Optional[AsyncPermit] = None

    async def __aenter__(self) -> AsyncPermit:
        self._permit = await self._acquire()
        return self._permit

    async def __aexit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        permit, self._permit = self._permit, None
        if permit is not None:
            await _release_at_exit(permit, et is None)


class AsyncSemaphore:
    """A handle on semaphore ``name`` (see sema.Semaphore); making one sends nothing."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self._acquire_path = fl.sem_path(name, "/acquire")
        self._client = client
        self.name = name
        self._held: Dict[AsyncPermit, None] = {}

    def __repr__(self) -> str:
        return "<AsyncSemaphore %r at %s>" % (self.name, self._client.url)

    async def create(self, capacity: int, *, tenant_max: Optional[int] = None,
                     rate_per_s: Optional[int] = None, rate_burst: Optional[int] = None) -> bool:
        return await self._client._run(fl.create(self._client._o.config, self.name, capacity,
                                                 tenant_max, rate_per_s, rate_burst))

    async def acquire(self, weight: int = 1, timeout: Optional[float] = None,
                      ttl: Optional[float] = None, owner: Optional[str] = None, *,
                      tenant: Optional[str] = None,
                      idempotency_key: Optional[str] = None) -> AsyncPermit:
        """As Semaphore.acquire; cancelling the task cancels the wait (nothing held)."""
        c = self._client
        body = fl.tenant_of(fl.acquire_body(c._o.config, ttl, owner), tenant)
        body["weight"] = fl.count(weight, "weight")
        key = fl.new_key() if idempotency_key is None else fl.check_key(idempotency_key)
        lease, sent = await c._run(fl.acquire(c._o.config, self._acquire_path, body, timeout,
                                              key))
        permit = AsyncPermit(c, lease, sent, self._forget)
        self._held[permit] = None
        return permit

    def _forget(self, permit: AsyncPermit) -> None:
        self._held.pop(permit, None)

    async def try_acquire(self, weight: int = 1, ttl: Optional[float] = None,
                          owner: Optional[str] = None, *,
                          tenant: Optional[str] = None) -> Optional[AsyncPermit]:
        try:
            return await self.acquire(weight, 0, ttl, owner, tenant=tenant)
        except Busy:
            return None

    def permit(self, weight: int = 1, timeout: Optional[float] = None,
               ttl: Optional[float] = None, owner: Optional[str] = None, *,
               tenant: Optional[str] = None) -> AsyncPermitContext:
        return AsyncPermitContext(lambda: self.acquire(weight, timeout, ttl, owner,
                                                       tenant=tenant))

    async def release(self, weight: int = 1) -> None:
        permit = next((p for p in self._held if p.weight == weight), None)
        if permit is None:
            raise Overflow("no permit of weight %r held through this handle of %r"
                           % (weight, self.name), code="overflow")
        await permit.release()

    async def wait_idle(self, timeout: Optional[float] = None) -> None:
        await self._client._run(fl.wait_idle(self._client._o.config, self.name, timeout))

    async def resize(self, capacity: int) -> SemaphoreState:
        return await self._client._run(fl.resize(self._client._o.config, self.name, capacity))

    async def configure(self, capacity: Optional[int] = None, *,
                        tenant_max: Optional[int] = None, rate_per_s: Optional[int] = None,
                        rate_burst: Optional[int] = None) -> SemaphoreState:
        body = {} if capacity is None else {"capacity": fl.count(capacity, "capacity")}
        return await self._client._run(fl.configure(self._client._o.config, self.name,
                                                    fl.limits(body, tenant_max, rate_per_s,
                                                              rate_burst)))

    async def state(self) -> SemaphoreState:
        return await self._client._run(fl.state(self._client._o.config, self.name))

    async def delete(self) -> None:
        await self._client._run(fl.delete(self._client._o.config, self.name))

    def watch(self, last_event_id: Optional[str] = None) -> AsyncEventStream:
        return self._client.watch(self.name, last_event_id)

    async def take_ticket(self, weight: int = 1, ttl: Optional[float] = None,
                          owner: Optional[str] = None, keepalive: Optional[float] = None, *,
                          tenant: Optional[str] = None,
                          idempotency_key: Optional[str] = None) -> AsyncTicket:
        c = self._client
        body = fl.ticket_body(c._o.config, ttl, owner, keepalive, tenant)
        body["weight"] = fl.count(weight, "weight")
        key = fl.new_key() if idempotency_key is None else fl.check_key(idempotency_key)
        path = fl.sem_path(self.name, "/tickets")
        return AsyncTicket(c, await c._run(fl.ticket_take(c._o.config, path, body, key)))

    async def map_limit(self, items: Union[Iterable[T], AsyncIterable[T]], limit: int,
                        fn: Callable[[T], Awaitable[R]], *, weight: int = 1) -> List[R]:
        """As Semaphore.map_limit, with ``fn`` a coroutine function run as tasks. Cancelling
        the call cancels the running tasks too."""
        return await _map_limit(self, items, fl.count(limit, "limit"), fn, weight)


async def _aiter(items: Union[Iterable[T], AsyncIterable[T]]) -> AsyncIterator[T]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


async def _map_limit(sem: AsyncSemaphore, items: Union[Iterable[T], AsyncIterable[T]],
                     limit: int, fn: Callable[[T], Awaitable[R]], weight: int) -> List[R]:
    results: Dict[int, R] = {}
    errors: List[BaseException] = []
    running: Set["asyncio.Task[None]"] = set()
    pending: List["asyncio.Task[AsyncPermit]"] = []

    async def run(i: int, item: T, permit: AsyncPermit) -> None:
        try:
            async with permit:
                results[i] = await fn(item)
        except Exception as e:
            errors.append(e)
            for p in pending:
                p.cancel()  # fail fast: the acquire waiting for the next item

    n = 0
    try:
        async for item in _aiter(items):
            while len(running) >= limit and not errors:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            if errors:
                break
            acquire = asyncio.ensure_future(sem.acquire(weight))
            pending.append(acquire)
            try:
                permit = await acquire
            except asyncio.CancelledError:
                if errors and acquire.cancelled():
                    break
                raise
            finally:
                pending.remove(acquire)
            task = asyncio.ensure_future(run(n, item, permit))
            running.add(task)
            task.add_done_callback(running.discard)
            n += 1
    except asyncio.CancelledError:
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
    except Exception as e:
        errors.insert(0, e)
    if running:
        await asyncio.gather(*running, return_exceptions=True)
    if errors:
        raise errors[0]
    return [results[i] for i in range(n)]


class AsyncKeyedLock:
    """A handle on the reader/writer lock of ``key`` (see sema.KeyedLock)."""

    def __init__(self, client: AsyncClient, key: str) -> None:
        fl.seg(key, "key")
        self._client = client
        self.key = key

    async def acquire(self, mode: str = "exclusive", timeout: Optional[float] = None,
                      ttl: Optional[float] = None, owner: Optional[str] = None, *,
                      idempotency_key: Optional[str] = None) -> AsyncPermit:
        if mode not in ("shared", "exclusive"):
            raise ValueError("mode must be 'shared' or 'exclusive', not %r" % (mode,))
        c = self._client
        body = fl.acquire_body(c._o.config, ttl, owner)
        body["mode"] = mode
        key = fl.new_key() if idempotency_key is None else fl.check_key(idempotency_key)
        path = "/v1/locks/" + fl.seg(self.key, "key") + "/acquire"
        lease, sent = await c._run(fl.acquire(c._o.config, path, body, timeout, key))
        return AsyncPermit(c, lease, sent)

    async def try_acquire(self, mode: str = "exclusive", ttl: Optional[float] = None,
                          owner: Optional[str] = None) -> Optional[AsyncPermit]:
        try:
            return await self.acquire(mode, 0, ttl, owner)
        except Busy:
            return None

    def read(self, timeout: Optional[float] = None, ttl: Optional[float] = None,
             owner: Optional[str] = None) -> AsyncPermitContext:
        return AsyncPermitContext(lambda: self.acquire("shared", timeout, ttl, owner))

    def write(self, timeout: Optional[float] = None, ttl: Optional[float] = None,
              owner: Optional[str] = None) -> AsyncPermitContext:
        return AsyncPermitContext(lambda: self.acquire("exclusive", timeout, ttl, owner))

    async def state(self) -> LockState:
        return await self._client._run(fl.lock_state(self._client._o.config, self.key))


class _AIter(Generic[T]):
    """An async iterator over a stream; ``aclose()`` (or cancelling the task) ends it."""

    def __init__(self, client: AsyncClient, flow: fl.Flow[None],
                 each: Optional[Callable[[Any], None]] = None) -> None:
        self._gen = client._runner.iterate(flow)
        self._each = each

    def __aiter__(self) -> _AIter[T]:
        return self

    async def __anext__(self) -> T:
        value = await self._gen.__anext__()
        if self._each is not None:
            self._each(value)
        item: T = value
        return item

    async def aclose(self) -> None:
        await self._gen.aclose()

    async def __aenter__(self) -> _AIter[T]:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


AsyncEventStream = _AIter[Event]
AsyncTicketUpdates = _AIter[TicketState]


class AsyncTicket(TicketFields):
    """A ticket (see sema.Ticket)."""

    def __init__(self, client: AsyncClient, st: TicketState) -> None:
        self._client = client
        self.state = st

    async def refresh(self, wait: Optional[float] = None) -> TicketState:
        self.state = await self._client._run(fl.ticket_get(self._client._o.config, self.id,
                                                           wait))
        return self.state

    def updates(self, last_event_id: Optional[str] = None) -> AsyncTicketUpdates:
        flow = fl.ticket_updates(self._client._o.config, self.id, last_event_id)
        return _AIter[TicketState](self._client, flow, self._set)

    async def wait_turn(self, timeout: Optional[float] = None, *,
                        on_update: Optional[Callable[[TicketState], None]] = None
                        ) -> AsyncPermit:
        if self.state.status != "granted":
            def seen(value: Any) -> None:
                self.state = value
                if on_update is not None:
                    on_update(value)
            self.state = await self._client._run(
                fl.wait_turn(self._client._o.config, self.state, timeout), seen)
        return ticket_permit(self._client, self.state, AsyncPermit)

    async def leave(self) -> None:
        await self._client._run(fl.ticket_leave(self._client._o.config, self.id))


class AsyncLegacy:
    """The five routes of the original semaphore service (see sema.Legacy)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(self, name: str, value: int) -> bool:
        return await self._client._run(fl.legacy_create(self._client._o.config, name, value))

    async def delete(self, name: str) -> bool:
        return await self._client._run(fl.legacy_delete(self._client._o.config, name))

    async def value(self, name: str) -> int:
        return await self._client._run(fl.legacy_value(self._client._o.config, name))

    async def up(self, name: str) -> int:
        return await self._client._run(fl.legacy_up(self._client._o.config, name))

    async def down(self, name: str) -> Optional[int]:
        return await self._client._run(fl.legacy_down(self._client._o.config, name))


class AsyncClient:
    """The asyncio client: the options and methods of sema.Client, as coroutines. Use it
    from one event loop; ``async with`` (or ``await close()``) releases what it holds."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 ca: Optional[str] = None, *, cert: Optional[str] = None,
                 key: Optional[str] = None, ssl_context: Optional[ssl.SSLContext] = None,
                 owner: Optional[str] = None, ttl: Optional[float] = None,
                 retry: float = 5.0, request_timeout: float = 30.0,
                 connect_timeout: float = 3.0, max_idle: int = 64) -> None:
        self._o = Options(url, token, ca, cert, key, ssl_context, owner, ttl, retry,
                          request_timeout, connect_timeout, max_idle)
        self._http = AsyncHttp(self._o)
        self._runner = _ARunner(self._http)
        self._run = self._runner.run
        self._renewer = _ARenewer()
        self._permits: Dict[AsyncPermit, None] = {}
        self.legacy = AsyncLegacy(self)

    @property
    def url(self) -> str:
        return self._o.url

    def __repr__(self) -> str:
        return "<sema.AsyncClient %s>" % self._o.url

    def semaphore(self, name: str) -> AsyncSemaphore:
        return AsyncSemaphore(self, name)

    def lock(self, key: str) -> AsyncKeyedLock:
        return AsyncKeyedLock(self, key)

    async def acquire_all(self, semaphores: Union[Mapping[str, int], Iterable[Any]],
                          timeout: Optional[float] = None, ttl: Optional[float] = None,
                          owner: Optional[str] = None, *, tenant: Optional[str] = None,
                          idempotency_key: Optional[str] = None) -> AsyncPermit:
        """As Client.acquire_all; cancelling the task cancels the wait (nothing held)."""
        body = fl.tenant_of(fl.acquire_body(self._o.config, ttl, owner), tenant)
        body["semaphores"] = fl.parts_body(semaphores)
        key = fl.new_key() if idempotency_key is None else fl.check_key(idempotency_key)
        lease, sent = await self._run(fl.acquire(self._o.config, fl.ALL_PATH, body, timeout,
                                                 key))
        return AsyncPermit(self, lease, sent)

    def permit_all(self, semaphores: Union[Mapping[str, int], Iterable[Any]],
                   timeout: Optional[float] = None, ttl: Optional[float] = None,
                   owner: Optional[str] = None, *,
                   tenant: Optional[str] = None) -> AsyncPermitContext:
        return AsyncPermitContext(lambda: self.acquire_all(semaphores, timeout, ttl, owner,
                                                           tenant=tenant))

    async def take_ticket_all(self, semaphores: Union[Mapping[str, int], Iterable[Any]],
                              ttl: Optional[float] = None, owner: Optional[str] = None,
                              keepalive: Optional[float] = None, *,
                              tenant: Optional[str] = None,
                              idempotency_key: Optional[str] = None) -> AsyncTicket:
        """As Client.take_ticket_all."""
        body = fl.ticket_body(self._o.config, ttl, owner, keepalive, tenant)
        body["semaphores"] = fl.parts_body(semaphores)
        key = fl.new_key() if idempotency_key is None else fl.check_key(idempotency_key)
        return AsyncTicket(self, await self._run(fl.ticket_take(self._o.config,
                                                                fl.TICKETS_PATH, body, key)))

    async def lease(self, lease_id: str) -> Lease:
        return await self._run(fl.lease_get(self._o.config, lease_id))

    async def revoke(self, lease_id: str) -> None:
        await self._run(fl.revoke(self._o.config, lease_id))

    async def ticket(self, ticket_id: str) -> AsyncTicket:
        return AsyncTicket(self, await self._run(fl.ticket_get(self._o.config, ticket_id,
                                                               None)))

    def watch(self, name: str, last_event_id: Optional[str] = None) -> AsyncEventStream:
        fl.seg(name)
        return _AIter[Event](self, fl.watch(self._o.config, name, last_event_id))

    async def close(self) -> None:
        """Releases every permit the client still holds, then closes its connections."""
        self._http._check_loop()  # those of an event loop gone are dropped, not closed
        for permit in list(self._permits):
            try:
                await permit.release()
            except SemaError:
                pass
        await self._http.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
