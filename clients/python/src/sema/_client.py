# SPDX-License-Identifier: MIT
"""_client.py - the synchronous client: flows run in the caller's thread on pooled
keep-alive connections, permits renewed by two background threads."""
from __future__ import annotations

import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import (Any, Callable, Dict, Generator, Generic, Iterable, List, Mapping,
                    Optional, Tuple, Type, TypeVar, Union)

from . import _flows as fl
from ._common import PermitFields, TicketFields, ticket_permit, unreachable
from ._http import Cancel, SyncHttp
from ._options import Options
from ._schedule import Schedule
from ._types import Lease, LockState, SemaphoreState, TicketState
from .errors import Cancelled, LeaseLost, Overflow, SemaError, Busy
from .events import Event

T = TypeVar("T")
R = TypeVar("R")
RENEWERS = 2  # threads renewing a client's permits
BodyKey = Tuple[int, Optional[float], Optional[str], Optional[str]]  # weight, ttl, owner, tenant
IDLE_LOOK = 1.0  # seconds between two looks of a renewer with nothing to renew


class _Runner:
    """Runs flows: requests on the client's connections, pauses with time.sleep (or on the
    caller's Cancel), stream lines in this thread."""

    def __init__(self, http: SyncHttp) -> None:
        self.http = http

    def _drive(self, flow: fl.Flow[T], cancel: Optional[Cancel],
               streams: List[fl.Stream]) -> Generator[Any, None, T]:
        value: Any = None
        error: Optional[BaseException] = None
        while True:
            try:
                op = flow.send(value) if error is None else flow.throw(error)
            except StopIteration as stop:
                result: T = stop.value
                return result
            value = error = None
            if type(op) is fl.Emit:
                yield op.value
                continue
            try:
                value = self._do(op, cancel, streams)
            except BaseException as e:  # thrown into the flow, which decides
                error = e

    def _do(self, op: fl.Op, cancel: Optional[Cancel], streams: List[fl.Stream]) -> Any:
        if type(op) is fl.Request:
            if not op.cancellable or cancel is None:
                return self.http.request(op, None)
            if cancel.is_set():
                raise Cancelled("cancelled", code="cancelled")
            return self.http.request(op, cancel)
        if type(op) is fl.Sleep:
            if cancel is None:
                time.sleep(op.seconds)
            elif cancel.wait(op.seconds):
                raise Cancelled("cancelled", code="cancelled")
            return None
        if type(op) is fl.OpenStream:
            stream = self.http.open_stream(op, cancel)
            if stream.handle is not None:
                streams.append(stream)
            return stream
        if type(op) is fl.ReadLine:
            return self.http.read_line(op.stream, cancel, op.timeout)
        if type(op) is fl.CloseStream:
            self.http.close_stream(op.stream)
            streams.remove(op.stream)
            return None
        raise TypeError("not an operation: %r" % (op,))

    def run(self, flow: fl.Flow[T], cancel: Optional[Cancel] = None,
            emit: Optional[Callable[[Any], None]] = None) -> T:
        """The flow to its end, in this thread: its value, or what it raises; what it emits
        goes to ``emit``."""
        streams: List[fl.Stream] = []
        drive = self._drive(flow, cancel, streams)
        try:
            while True:
                try:
                    value = next(drive)
                except StopIteration as stop:
                    result: T = stop.value
                    return result
                if emit is not None:
                    emit(value)
        finally:
            for s in streams:
                self.http.close_stream(s)

    def iterate(self, flow: fl.Flow[None], cancel: Cancel) -> Generator[Any, None, None]:
        streams: List[fl.Stream] = []
        try:
            yield from self._drive(flow, cancel, streams)
        finally:
            for s in streams:
                self.http.close_stream(s)


class _Renewer:
    """Renews a client's permits: RENEWERS daemon threads take what is due from one
    Schedule, under a condition variable."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # entered directly: cheaper than the Condition's enter
        self._cond = threading.Condition(self._lock)
        self._schedule = Schedule()
        self._threads: List[threading.Thread] = []
        # When a waiting renewer looks at the schedule next: a permit due later needs no
        # wake-up (waking a thread costs the caller a switch of the GIL, more than its
        # request).
        self._wake_at = float("inf")

    def schedule(self, permit: Permit, at: float, gen: int) -> None:
        with self._lock:
            self._schedule.push(permit, at, gen)
            if len(self._threads) < RENEWERS:
                t = threading.Thread(target=self._main, name="sema-renew", daemon=True)
                self._threads.append(t)
                t.start()
            if at < self._wake_at:  # before the renewers would look again: wake one
                self._wake_at = at
                self._cond.notify()

    def dropped(self) -> None:
        # counted without the lock (a count lost to a race only delays a compaction): every
        # release passes here, and 50 threads would queue on the lock
        if self._schedule.dropped():
            with self._lock:
                self._schedule.compact()

    def _main(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    due = self._schedule.pop_due(now)
                    if due is not None:
                        break
                    # nothing to renew: look again in a while, not at each new permit
                    at = self._schedule.next_at() or now + IDLE_LOOK
                    self._wake_at = at
                    self._cond.wait(at - now)
            permit, gen = due
            permit._tick(gen)


class Permit(PermitFields):
    """A held lease: ``weight`` units of semaphore ``name`` (or a lock on ``key``) until
    ``release()``. Renewed in the background every ttl/3; ``lost`` is set when the lease is
    lost (revoked, expired, its semaphore deleted, or no renewal reached semad before the
    ttl ran out), and ``release()`` then raises LeaseLost. A context manager: released when
    the block ends."""

    def __init__(self, client: Client, lease: Lease, sent: float,
                 on_end: Optional[Callable[[Permit], None]] = None,
                 left: Optional[float] = None) -> None:
        self._client = client
        self._deadline, first = self._fields(lease, sent, left)
        self._lost: Optional[threading.Event] = None  # made when first asked for
        self._lock = threading.Lock()
        self._on_end = on_end
        client._permits[self] = None
        self._schedule(first)

    @property
    def lost(self) -> threading.Event:
        """Set when the lease is lost (never by release()): wait on it, or look."""
        if self._lost is None:
            with self._lock:
                if self._lost is None:
                    self._lost = threading.Event()
                    if self._error is not None:
                        self._lost.set()
        return self._lost

    def _schedule(self, at: float) -> None:
        """Called with the lock held, or before the permit is shared."""
        self._gen += 1
        self._client._renewer.schedule(self, min(at, self._deadline), self._gen)

    def _tick(self, gen: int) -> None:
        """A renewal (or the deadline) is due: on a renewal thread."""
        with self._lock:
            if gen != self._gen or self._released or self._error is not None:
                return
            now = time.monotonic()
            if now >= self._deadline:
                self._lose(unreachable(self.lease))
                return
            timeout = min(self._client._o.config.request_timeout, max(0.05, self._deadline - now))
        sent = time.monotonic()
        try:
            lease = self._client._run(fl.renew(self._client._o.config, self.lease,
                                               round(self.ttl * 1000), timeout, fl.NEVER))
        except LeaseLost as e:
            with self._lock:
                self._lose(e)
            return
        except SemaError:  # no reply, a 503: again soon, until the deadline
            with self._lock:
                if gen == self._gen and not self._released:
                    self._schedule(time.monotonic() + min(self.ttl / 6, 1.0))
            return
        with self._lock:
            if gen == self._gen and not self._released and self._error is None:
                self._renewed(lease, sent)

    def _renewed(self, lease: Lease, sent: float) -> None:
        self.expires_at, self.ttl = lease.expires_at, lease.ttl
        self._deadline = max(self._deadline, sent + lease.ttl)
        self._schedule(time.monotonic() + self.ttl / 3)

    def _lose(self, e: LeaseLost) -> None:
        """With the lock held."""
        if self._error is None and not self._released:
            self._error = e
            self._gen += 1
            if self._lost is not None:
                self._lost.set()
            self._client._renewer.dropped()

    def renew(self, ttl: Optional[float] = None) -> None:
        """Renews now (the background renewal does it by itself), for ``ttl`` seconds
        (default: the lease's). Raises LeaseLost if the lease is gone."""
        ttl_ms = fl.to_ms(self.ttl if ttl is None else ttl, "ttl", 1)
        sent = time.monotonic()
        o = self._client._o.config
        try:
            lease = self._client._run(fl.renew(o, self.lease, ttl_ms, o.request_timeout,
                                               fl.NETWORK))
        except LeaseLost as e:
            with self._lock:
                self._lose(e)
            raise
        with self._lock:
            if not self._released and self._error is None:
                self._renewed(lease, sent)

    def release(self) -> None:
        """Gives the units back. Releasing again does nothing. Raises LeaseLost if the lease
        was lost before (the units were not held to the end), or the error of a release
        that got no answer within the retry budget (the lease then ends with its ttl)."""
        with self._lock:
            if self._released:
                return
            self._released = True
            self._gen += 1
            error = self._error
        if error is None:
            self._client._renewer.dropped()
        self._client._permits.pop(self, None)
        if self._on_end is not None:
            self._on_end(self)
        if error is not None and error.code != "unreachable":
            raise error
        try:
            self._client._run(fl.release(self._client._o.config, self.lease))
        except LeaseLost as e:
            with self._lock:
                self._error = self._error or e
            self.lost.set()
            raise self._error from None
        except SemaError:
            if error is not None:  # lost already: that is the news, not the failed release
                raise error from None
            raise
        if error is not None:
            raise error

    def __enter__(self) -> Permit:
        return self

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        _release_at_exit(self, et is None)


def _release_at_exit(permit: Permit, clean: bool) -> None:
    """Releases at the end of a with block: a failure to release is raised only when the
    block itself raised nothing (its exception is the one to see)."""
    try:
        permit.release()
    except SemaError:
        if clean:
            raise


class PermitContext:
    """``with sem.permit(2, timeout=5) as p:``: acquires on entry, releases on exit."""

    def __init__(self, acquire: Callable[[], Permit]) -> None:
        self._acquire = acquire
        self._permit: Optional[Permit] = None

    def __enter__(self) -> Permit:
        self._permit = self._acquire()
        return self._permit

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        permit, self._permit = self._permit, None
        if permit is not None:
            _release_at_exit(permit, et is None)


class Semaphore:
    """A handle on semaphore ``name``. Making one sends nothing: each method is one call,
    needing the right listed in the client's README."""

    def __init__(self, client: Client, name: str) -> None:
        self._acquire_path = fl.sem_path(name, "/acquire")
        self._client = client
        self.name = name
        # permits taken through this handle, oldest first (dict operations are atomic)
        self._held: Dict[Permit, None] = {}
        self._bodies: Dict[BodyKey, Tuple[Dict[str, Any], bytes]] = {}

    def __repr__(self) -> str:
        return "<Semaphore %r at %s>" % (self.name, self._client.url)

    def create(self, capacity: int, *, tenant_max: Optional[int] = None,
               rate_per_s: Optional[int] = None, rate_burst: Optional[int] = None) -> bool:
        """Creates it with ``capacity`` (PUT, right ``admin``): True when created, False
        when it existed with this capacity and limits; Conflict with others. ``tenant_max``:
        the most one tenant may hold; ``rate_per_s``: units granted per second at most,
        ``rate_burst`` at once after a pause (default rate_per_s)."""
        return self._client._run(fl.create(self._client._o.config, self.name, capacity,
                                           tenant_max, rate_per_s, rate_burst))

    def acquire(self, weight: int = 1, timeout: Optional[float] = None,
                ttl: Optional[float] = None, owner: Optional[str] = None, *,
                tenant: Optional[str] = None, idempotency_key: Optional[str] = None,
                cancel: Optional[Cancel] = None) -> Permit:
        """Waits for ``weight`` units (one long-poll request, FIFO across every client) and
        returns the permit. ``timeout`` in seconds: None (or negative) waits as long as it
        takes, 0 tries once. ``tenant``: whose share the units count to (tenants take
        turns by units; none holds more than the semaphore's tenant_max). Raises Timeout,
        Busy (a try), TooHeavy, NotFound, SemaphoreDeleted, or Cancelled when ``cancel``
        is set."""
        c = self._client
        body, encoded = self._body(weight, ttl, owner, tenant)
        key = fl.new_key() if idempotency_key is None else fl.check_key(idempotency_key)
        lease, sent = c._run(fl.acquire(c._o.config, self._acquire_path, body, timeout, key,
                                        encoded), cancel)
        permit = Permit(c, lease, sent, self._forget)
        self._held[permit] = None
        return permit

    def _body(self, weight: int, ttl: Optional[float], owner: Optional[str],
              tenant: Optional[str]) -> Tuple[Dict[str, Any], bytes]:
        """An acquire's body and its bytes, kept for the handle's few usual shapes (a
        blocking acquire sends the same bytes every time)."""
        got = self._bodies.get((weight, ttl, owner, tenant))
        if got is None:
            body = fl.tenant_of(fl.acquire_body(self._client._o.config, ttl, owner), tenant)
            body["weight"] = fl.count(weight, "weight")
            got = body, fl.dumps(body)
            if len(self._bodies) < 16:
                self._bodies[(weight, ttl, owner, tenant)] = got
        return got

    def _forget(self, permit: Permit) -> None:
        self._held.pop(permit, None)

    def try_acquire(self, weight: int = 1, ttl: Optional[float] = None,
                    owner: Optional[str] = None, *,
                    tenant: Optional[str] = None) -> Optional[Permit]:
        """The permit if ``weight`` units are free now, else None (never queues, never
        jumps the queue)."""
        try:
            return self.acquire(weight, 0, ttl, owner, tenant=tenant)
        except Busy:
            return None

    def permit(self, weight: int = 1, timeout: Optional[float] = None,
               ttl: Optional[float] = None, owner: Optional[str] = None, *,
               tenant: Optional[str] = None, cancel: Optional[Cancel] = None) -> PermitContext:
        """``with sem.permit(2, timeout=5) as p:`` holds 2 units for the block."""
        return PermitContext(lambda: self.acquire(weight, timeout, ttl, owner, tenant=tenant,
                                                  cancel=cancel))

    def release(self, weight: int = 1) -> None:
        """Weighted-semaphore style: releases the oldest permit of ``weight`` taken through
        this handle. Overflow when there is none."""
        permit = next((p for p in list(self._held) if p.weight == weight), None)
        if permit is None:
            raise Overflow("no permit of weight %r held through this handle of %r"
                           % (weight, self.name), code="overflow")
        permit.release()

    def wait_idle(self, timeout: Optional[float] = None, *,
                  cancel: Optional[Cancel] = None) -> None:
        """Waits until everything queued before it was granted and all units are back
        (the weighted semaphore's ``wait()``); takes nothing. Timeout after ``timeout`` s."""
        self._client._run(fl.wait_idle(self._client._o.config, self.name, timeout), cancel)

    def resize(self, capacity: int) -> SemaphoreState:
        """Changes the capacity (PATCH, ``admin``): growing admits waiters, shrinking never
        revokes (waiters heavier than the new capacity fail TooHeavy)."""
        return self._client._run(fl.resize(self._client._o.config, self.name, capacity))

    def configure(self, capacity: Optional[int] = None, *, tenant_max: Optional[int] = None,
                  rate_per_s: Optional[int] = None,
                  rate_burst: Optional[int] = None) -> SemaphoreState:
        """Changes the capacity and limits given (PATCH, ``admin``); the others stay. A
        limit of 0 removes it."""
        body = {} if capacity is None else {"capacity": fl.count(capacity, "capacity")}
        return self._client._run(fl.configure(self._client._o.config, self.name,
                                              fl.limits(body, tenant_max, rate_per_s,
                                                        rate_burst)))

    def state(self) -> SemaphoreState:
        """Its state now: capacity, available, holders, waiters (GET, ``read``)."""
        return self._client._run(fl.state(self._client._o.config, self.name))

    def delete(self) -> None:
        """Deletes it (``admin``): waiters fail SemaphoreDeleted, held leases are lost."""
        self._client._run(fl.delete(self._client._o.config, self.name))

    def watch(self, last_event_id: Optional[str] = None) -> EventStream:
        """Its events (``read``); see Client.watch."""
        return self._client.watch(self.name, last_event_id)

    def take_ticket(self, weight: int = 1, ttl: Optional[float] = None,
                    owner: Optional[str] = None, keepalive: Optional[float] = None, *,
                    tenant: Optional[str] = None,
                    idempotency_key: Optional[str] = None) -> Ticket:
        """A place in this semaphore's line that holds no connection (``acquire``): answered
        at once, waiting with its position or already granted. Read it within its keepalive
        (``refresh``, ``updates``, ``wait_turn``) or it leaves the line."""
        c = self._client
        body = fl.ticket_body(c._o.config, ttl, owner, keepalive, tenant)
        body["weight"] = fl.count(weight, "weight")
        key = fl.new_key() if idempotency_key is None else fl.check_key(idempotency_key)
        path = fl.sem_path(self.name, "/tickets")
        return Ticket(c, c._run(fl.ticket_take(c._o.config, path, body, key)))

    def map_limit(self, items: Iterable[T], limit: int, fn: Callable[[T], R], *,
                  weight: int = 1) -> List[R]:
        """``fn(item)`` for every item on up to ``limit`` threads, each call holding
        ``weight`` units of this semaphore (so the semaphore's capacity bounds the calls
        fleet-wide). Results in input order. The first exception stops new work (the
        pending acquire is cancelled, running calls finish) and is raised."""
        return _map_limit(self, items, fl.count(limit, "limit"), fn, weight)


def _map_limit(sem: Semaphore, items: Iterable[T], limit: int, fn: Callable[[T], R],
               weight: int) -> List[R]:
    results: Dict[int, R] = {}
    errors: List[BaseException] = []
    stop = Cancel()
    slots = threading.Semaphore(limit)
    lock = threading.Lock()

    def run(i: int, item: T, permit: Permit) -> None:
        try:
            with permit:
                results[i] = fn(item)
        except BaseException as e:
            with lock:
                errors.append(e)
            stop.set()
        finally:
            slots.release()

    n = 0
    with ThreadPoolExecutor(limit, thread_name_prefix="sema-map") as pool:
        try:
            for item in items:
                slots.acquire()
                if stop.is_set():
                    break
                try:  # one acquire at a time: items start in input order
                    permit = sem.acquire(weight, cancel=stop)
                except Cancelled:
                    break
                pool.submit(run, n, item, permit)
                n += 1
        except BaseException as e:  # an acquire failed, or the items themselves
            with lock:
                errors.insert(0, e)
            stop.set()
    if errors:
        raise errors[0]
    return [results[i] for i in range(n)]


class KeyedLock:
    """A handle on the reader/writer lock of ``key`` (a key exists on semad only while held
    or awaited). ``read()`` / ``write()`` are context managers; writers are not starved."""

    def __init__(self, client: Client, key: str) -> None:
        fl.seg(key, "key")
        self._client = client
        self.key = key

    def acquire(self, mode: str = "exclusive", timeout: Optional[float] = None,
                ttl: Optional[float] = None, owner: Optional[str] = None, *,
                idempotency_key: Optional[str] = None,
                cancel: Optional[Cancel] = None) -> Permit:
        """The lock in ``mode`` (``"shared"`` or ``"exclusive"``) as a Permit with ``key``
        and ``mode``; as Semaphore.acquire otherwise."""
        if mode not in ("shared", "exclusive"):
            raise ValueError("mode must be 'shared' or 'exclusive', not %r" % (mode,))
        c = self._client
        body = fl.acquire_body(c._o.config, ttl, owner)
        body["mode"] = mode
        key = fl.new_key() if idempotency_key is None else fl.check_key(idempotency_key)
        path = "/v1/locks/" + fl.seg(self.key, "key") + "/acquire"
        lease, sent = c._run(fl.acquire(c._o.config, path, body, timeout, key), cancel)
        return Permit(c, lease, sent)

    def try_acquire(self, mode: str = "exclusive", ttl: Optional[float] = None,
                    owner: Optional[str] = None) -> Optional[Permit]:
        try:
            return self.acquire(mode, 0, ttl, owner)
        except Busy:
            return None

    def read(self, timeout: Optional[float] = None, ttl: Optional[float] = None,
             owner: Optional[str] = None, *, cancel: Optional[Cancel] = None) -> PermitContext:
        """``with lock.read():`` holds it shared: readers overlap."""
        return PermitContext(lambda: self.acquire("shared", timeout, ttl, owner, cancel=cancel))

    def write(self, timeout: Optional[float] = None, ttl: Optional[float] = None,
              owner: Optional[str] = None, *, cancel: Optional[Cancel] = None) -> PermitContext:
        """``with lock.write():`` holds it exclusive: alone."""
        return PermitContext(lambda: self.acquire("exclusive", timeout, ttl, owner,
                                                  cancel=cancel))

    def state(self) -> LockState:
        """Holders and waiters (``read``); NotFound when nobody holds or awaits it."""
        return self._client._run(fl.lock_state(self._client._o.config, self.key))


class _Iter(Generic[T]):
    """An iterator over a stream (events, ticket states) that ``close()`` ends from any
    thread; a context manager."""

    def __init__(self, client: Client, flow: fl.Flow[None],
                 each: Optional[Callable[[Any], None]] = None) -> None:
        self._cancel = Cancel()
        self._gen = client._runner.iterate(flow, self._cancel)
        self._each = each

    def __iter__(self) -> _Iter[T]:
        return self

    def __next__(self) -> T:
        try:
            value = next(self._gen)
        except Cancelled:
            if self._cancel.is_set():
                raise StopIteration from None
            raise
        if self._each is not None:
            self._each(value)
        item: T = value
        return item

    def close(self) -> None:
        """Ends the stream (its connection closes); a thread blocked in it stops."""
        self._cancel.set()
        try:
            self._gen.close()
        except ValueError:  # running in another thread: the cancel ends it there
            pass

    def __enter__(self) -> _Iter[T]:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


EventStream = _Iter[Event]
TicketUpdates = _Iter[TicketState]


class Ticket(TicketFields):
    """A ticket: a place in a semaphore's line that no connection holds. Its latest state
    is ``state`` (and the attributes that mirror it). Keep ``id`` (a cookie, say): any
    process with the same token can read it back with ``client.ticket(id)``."""

    def __init__(self, client: Client, st: TicketState) -> None:
        self._client = client
        self.state = st

    def refresh(self, wait: Optional[float] = None) -> TicketState:
        """Reads it again (``acquire``, the ticket's own token); with ``wait`` seconds a
        long-poll that answers when its status or position changes. TicketEnded once it
        left the line."""
        self.state = self._client._run(fl.ticket_get(self._client._o.config, self.id, wait))
        return self.state

    def updates(self, last_event_id: Optional[str] = None) -> TicketUpdates:
        """Its states as they change (a stream; positions at most once per poll_after):
        ends after the grant; raises TicketEnded if it ends while waiting."""
        flow = fl.ticket_updates(self._client._o.config, self.id, last_event_id)
        return _Iter[TicketState](self._client, flow, self._set)

    def wait_turn(self, timeout: Optional[float] = None, *,
                  on_update: Optional[Callable[[TicketState], None]] = None,
                  cancel: Optional[Cancel] = None) -> Permit:
        """Waits until it is granted and returns its lease as a Permit, renewed in the
        background. It follows the ticket's stream, which keeps it in line; ``on_update``
        sees each new position. Timeout (or a cancel) leaves the ticket in line:
        ``leave()`` to give up the place."""
        if self.state.status != "granted":
            def seen(value: Any) -> None:
                self.state = value
                if on_update is not None:
                    on_update(value)
            self.state = self._client._run(fl.wait_turn(self._client._o.config, self.state,
                                                        timeout), cancel, seen)
        return ticket_permit(self._client, self.state, Permit)

    def leave(self) -> None:
        """Leaves the line (a granted ticket's lease is released); nothing if it ended."""
        self._client._run(fl.ticket_leave(self._client._o.config, self.id))


class Legacy:
    """The five routes of the original semaphore service (docs/http-api.md#legacy-api)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(self, name: str, value: int) -> bool:
        """POST /semaphore (``admin``): False when the name existed (nothing changed)."""
        return self._client._run(fl.legacy_create(self._client._o.config, name, value))

    def delete(self, name: str) -> bool:
        """DELETE /semaphore/{name} (``admin``): False when there was no such name."""
        return self._client._run(fl.legacy_delete(self._client._o.config, name))

    def value(self, name: str) -> int:
        """GET /semaphore/value/{name} (``read``): the available units."""
        return self._client._run(fl.legacy_value(self._client._o.config, name))

    def up(self, name: str) -> int:
        """POST /semaphore/up (``acquire``): adds a unit; the new value."""
        return self._client._run(fl.legacy_up(self._client._o.config, name))

    def down(self, name: str) -> Optional[int]:
        """POST /semaphore/down (``acquire``): takes a unit without a lease; the new value,
        or None when it is locked (0, or v1 requests queued)."""
        return self._client._run(fl.legacy_down(self._client._o.config, name))


class Client:
    """A client of the semad at ``url`` (default $SEMA_SERVER, else
    http://127.0.0.1:7070), sending ``token`` (default $SEMA_TOKEN) with every request.
    Thread-safe: share one client between threads. Durations are seconds."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 ca: Optional[str] = None, *, cert: Optional[str] = None,
                 key: Optional[str] = None, ssl_context: Optional[ssl.SSLContext] = None,
                 owner: Optional[str] = None, ttl: Optional[float] = None,
                 retry: float = 5.0, request_timeout: float = 30.0,
                 connect_timeout: float = 3.0, max_idle: int = 64) -> None:
        self._o = Options(url, token, ca, cert, key, ssl_context, owner, ttl, retry,
                          request_timeout, connect_timeout, max_idle)
        self._http = SyncHttp(self._o)
        self._runner = _Runner(self._http)
        self._run = self._runner.run
        self._renewer = _Renewer()
        self._permits: Dict[Permit, None] = {}
        self.legacy = Legacy(self)

    @property
    def url(self) -> str:
        return self._o.url

    def __repr__(self) -> str:
        return "<sema.Client %s>" % self._o.url

    def semaphore(self, name: str) -> Semaphore:
        """A handle on semaphore ``name``; sends nothing."""
        return Semaphore(self, name)

    def lock(self, key: str) -> KeyedLock:
        """A handle on the reader/writer lock of ``key``; sends nothing."""
        return KeyedLock(self, key)

    def acquire_all(self, semaphores: Union[Mapping[str, int], Iterable[Any]],
                    timeout: Optional[float] = None, ttl: Optional[float] = None,
                    owner: Optional[str] = None, *, tenant: Optional[str] = None,
                    idempotency_key: Optional[str] = None,
                    cancel: Optional[Cancel] = None) -> Permit:
        """Units of several semaphores at once, all or nothing (``acquire``): ``semaphores``
        is {name: weight}, or names (weight 1) and (name, weight) pairs, 1 to 16. The
        request waits in every semaphore's line and holds nothing until it is granted on
        all; the permit is one lease (``parts``, ``fences`` by name), renewed and released
        as one. Raises as Semaphore.acquire (NotFound when one of them does not exist)."""
        body = fl.tenant_of(fl.acquire_body(self._o.config, ttl, owner), tenant)
        body["semaphores"] = fl.parts_body(semaphores)
        key = fl.new_key() if idempotency_key is None else fl.check_key(idempotency_key)
        lease, sent = self._run(fl.acquire(self._o.config, fl.ALL_PATH, body, timeout, key),
                                cancel)
        return Permit(self, lease, sent)

    def permit_all(self, semaphores: Union[Mapping[str, int], Iterable[Any]],
                   timeout: Optional[float] = None, ttl: Optional[float] = None,
                   owner: Optional[str] = None, *, tenant: Optional[str] = None,
                   cancel: Optional[Cancel] = None) -> PermitContext:
        """``with client.permit_all({"gpu": 2, "db": 1}) as p:`` holds them for the block."""
        return PermitContext(lambda: self.acquire_all(semaphores, timeout, ttl, owner,
                                                      tenant=tenant, cancel=cancel))

    def take_ticket_all(self, semaphores: Union[Mapping[str, int], Iterable[Any]],
                        ttl: Optional[float] = None, owner: Optional[str] = None,
                        keepalive: Optional[float] = None, *, tenant: Optional[str] = None,
                        idempotency_key: Optional[str] = None) -> Ticket:
        """A ticket on several semaphores at once (``acquire``): ``semaphores`` as for
        acquire_all. It keeps a place in every semaphore's line and is granted one lease on
        them all (its ``parts``, ``fences`` by name), as acquire_all is; its ``position``
        is that of the line where it stands furthest back. Read it as any ticket."""
        body = fl.ticket_body(self._o.config, ttl, owner, keepalive, tenant)
        body["semaphores"] = fl.parts_body(semaphores)
        key = fl.new_key() if idempotency_key is None else fl.check_key(idempotency_key)
        return Ticket(self, self._run(fl.ticket_take(self._o.config, fl.TICKETS_PATH, body,
                                                     key)))

    def lease(self, lease_id: str) -> Lease:
        """A lease by id (``read``); LeaseLost once it ended, NotFound if never seen."""
        return self._run(fl.lease_get(self._o.config, lease_id))

    def revoke(self, lease_id: str) -> None:
        """Revokes any lease (``admin``): its holder's permit is lost at its next renewal."""
        self._run(fl.revoke(self._o.config, lease_id))

    def ticket(self, ticket_id: str) -> Ticket:
        """A ticket by id, read now (``acquire``, the token that took it)."""
        return Ticket(self, self._run(fl.ticket_get(self._o.config, ticket_id, None)))

    def watch(self, name: str, last_event_id: Optional[str] = None) -> EventStream:
        """Semaphore ``name``'s events (``read``) as an iterator of typed events
        (sema.events): after a dropped connection it resumes with Last-Event-ID (nothing
        missed, nothing twice; ``Reset`` when semad no longer had them). Ends after
        ``Deleted`` or ``close()``. NotFound if there is no such semaphore."""
        fl.seg(name)
        return _Iter[Event](self, fl.watch(self._o.config, name, last_event_id))

    def close(self) -> None:
        """Releases every permit the client still holds, then closes its connections."""
        for permit in list(self._permits):
            try:
                permit.release()
            except SemaError:
                pass
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
