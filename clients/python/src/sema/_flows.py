# SPDX-License-Identifier: MIT
"""_flows.py - the client's protocol, written once for both clients.

Every call is a generator (a *flow*) that yields what it needs done - a request, a pause,
a line of an event stream, a value for the caller - and receives the outcome (or has the
failure thrown in: NetworkError, or the caller's cancellation). The synchronous client runs
flows on http.client connections in the caller's thread, the asyncio client on asyncio
streams; what is sent, what is retried and how replies are read is here, once.
"""
from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Callable, Dict, Generator, List, Optional, Tuple, TypeVar, Union
from urllib.parse import quote

from . import events as ev
from ._types import Lease, LockState, SemaphoreState, TicketState
from .errors import NetworkError, ProtocolError, Timeout, error_from_reply

T = TypeVar("T")

# How a request may be sent again (docs/client.md#retries):
NEVER = 0    # not at all: it may have run (delete, revoke, the legacy writes)
NETWORK = 1  # after a network error: harmless to repeat (create, resize, renew, a keyed acquire)
READ = 2     # after a network error and after a 503: reads, and the ends of leases and tickets

BACKOFF_FIRST = 0.1  # seconds before the first retry, doubling ...
BACKOFF_MAX = 1.0    # ... to at most this
STREAM_BACKOFF_MAX = 2.0
DROP_TIMEOUT = 2.0     # each request of the clean-up after an acquire that lost its reply


class Request:
    """One HTTP request. ``wait``: it may wait on semad (a long-poll); ``timeout``: the
    longest wait for its reply in seconds (None: no limit); ``cancellable``: the caller's
    cancellation interrupts it (clean-up requests are not)."""

    __slots__ = ("method", "path", "body", "key", "wait", "timeout", "cancellable")

    def __init__(self, method: str, path: str, body: Optional[bytes], key: Optional[str],
                 wait: bool, timeout: Optional[float], cancellable: bool) -> None:
        self.method = method
        self.path = path
        self.body = body
        self.key = key  # the Idempotency-Key header, if any
        self.wait = wait
        self.timeout = timeout
        self.cancellable = cancellable


class Reply:
    """A whole reply: status, body, and (on an error) the seconds its Retry-After asked."""

    __slots__ = ("status", "body", "retry_after")

    def __init__(self, status: int, body: bytes, retry_after: Optional[float]) -> None:
        self.status = status
        self.body = body
        self.retry_after = retry_after


class Sleep:
    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class OpenStream:
    """A GET whose body is read a line at a time; the runner answers with a Stream."""

    __slots__ = ("path", "last_event_id")

    def __init__(self, path: str, last_event_id: Optional[str]) -> None:
        self.path = path
        self.last_event_id = last_event_id


class Stream:
    """An open stream: ``status``, ``body`` (the whole body when status is not 2xx) and the
    transport's ``handle``."""

    __slots__ = ("status", "body", "handle")

    def __init__(self, status: int, body: bytes, handle: Any) -> None:
        self.status = status
        self.body = body
        self.handle = handle


class ReadLine:
    """The next line of a stream, its newline included; b"" at its end. With ``timeout``
    (seconds), StreamTimeout when no line came by then."""

    __slots__ = ("stream", "timeout")

    def __init__(self, stream: Stream, timeout: Optional[float] = None) -> None:
        self.stream = stream
        self.timeout = timeout


class StreamTimeout(Exception):
    """No line of a stream within its ReadLine's timeout (the runner closed the stream)."""


class CloseStream:
    __slots__ = ("stream",)

    def __init__(self, stream: Stream) -> None:
        self.stream = stream


class Emit:
    """A value for the caller (an event, a ticket's new position); the flow goes on after."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


Op = Union[Request, Sleep, OpenStream, ReadLine, CloseStream, Emit]
Flow = Generator[Op, Any, T]


class Config:
    """What every flow needs of the client's options. Times in seconds."""

    __slots__ = ("retry", "request_timeout", "owner", "ttl_ms")

    def __init__(self, retry: float, request_timeout: float, owner: Optional[str],
                 ttl_ms: Optional[int]) -> None:
        self.retry = retry
        self.request_timeout = request_timeout
        self.owner = owner
        self.ttl_ms = ttl_ms


# ---- small helpers ----

_PLAIN = re.compile(r"[A-Za-z0-9_.~-]+")  # what quote() leaves as it is (lease ids are so)


def text(s: Any, what: str) -> str:
    """A string sent to semad (a name, owner, tenant, idempotency key): a str that is UTF-8
    once encoded, so not one with a lone surrogate (what os.environ and sys.argv make of
    bytes that are not UTF-8). Anything else is a ValueError naming it, before anything is
    sent: semad refuses such a string, or the encoding would fail midway."""
    try:
        if isinstance(s, str):
            s.encode()
            return s
    except UnicodeEncodeError:
        pass
    raise ValueError("%s must be valid UTF-8 text (a str without lone surrogates), not %.100r"
                     % (what, s))


def seg(name: str, what: str = "name") -> str:
    """A semaphore name, lock key or id as one path segment. An empty one (or not a str)
    is a ValueError here: on the wire it would be another route."""
    if not isinstance(name, str) or not name:
        raise ValueError("%s must be a non-empty str, not %r" % (what, name))
    return name if _PLAIN.fullmatch(name) else quote(text(name, what), safe="")


def to_ms(seconds: float, what: str, minimum: int = 0) -> int:
    """Seconds (a float, as everywhere in Python) to the milliseconds semad reads."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds != seconds:
        raise TypeError("%s must be a number of seconds, not %r" % (what, seconds))
    ms = int(round(seconds * 1000))
    if ms < minimum or ms > 2 ** 53:
        raise ValueError("%s must be between %g and 2^53 ms, not %r s"
                         % (what, minimum / 1000, seconds))
    return ms


def count(n: int, what: str) -> int:
    """A weight or capacity: an int from 1 to 2^53 (semad refuses more)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 2 ** 53:
        raise ValueError("%s must be an int between 1 and 2^53, not %r" % (what, n))
    return n


def new_key() -> str:
    """An Idempotency-Key: 32 random hex characters (as the C client's)."""
    return os.urandom(16).hex()


def check_key(key: str) -> str:
    if not 0 < len(text(key, "idempotency_key").encode()) <= 255 or \
            any(c < " " or c == "\x7f" for c in key):
        raise ValueError("idempotency_key must be 1..255 bytes, no control characters")
    return key


_ENCODER = json.JSONEncoder(separators=(",", ":"))


def dumps(body: Dict[str, Any]) -> bytes:
    return _ENCODER.encode(body).encode()


def loads(reply: Reply) -> Any:
    try:
        return json.loads(reply.body)
    except ValueError:
        raise ProtocolError("a reply that is not JSON from semad: %.200r" % reply.body,
                            code="protocol", status=reply.status) from None


def backoff(tries: int) -> float:
    return min(BACKOFF_FIRST * float(1 << min(tries, 16)), BACKOFF_MAX)


def send(req: Request) -> Flow[Reply]:
    reply = yield req
    assert isinstance(reply, Reply)
    return reply


def pause(seconds: float) -> Flow[None]:
    yield Sleep(seconds)


class Budget:
    """The retries of one call: they go on while each starts within ``retry`` seconds of
    the call's first failure, 0.1 s doubling to 1 s apart, never sooner than a 503's
    Retry-After asks (one that asks past the budget ends them)."""

    __slots__ = ("retry", "until", "tries")

    def __init__(self, retry: float) -> None:
        self.retry = retry
        self.until: Optional[float] = None
        self.tries = 0

    def next_wait(self, retry_after: Optional[float] = None) -> Optional[float]:
        now = time.monotonic()
        if self.until is None:
            self.until = now + self.retry
        wait = max(backoff(self.tries), retry_after or 0.0)
        if now + wait > self.until:
            return None
        self.tries += 1
        return wait


# ---- plain calls ----

def retried(cfg: Config, req: Request, retry: int) -> Flow[Tuple[Reply, int]]:
    """``req``, sent again as ``retry`` allows; returns the last reply and how many retries
    it took (a 503 too, once the retries are spent). Raises NetworkError when no reply came."""
    budget: Optional[Budget] = None  # made at the first failure (most calls have none)
    while True:
        try:
            reply = yield req
        except NetworkError as e:
            if retry == NEVER or not e.retryable:
                raise
            budget = budget or Budget(cfg.retry)
            wait = budget.next_wait()
            if wait is None:
                raise
        else:
            if reply.status != 503 or retry != READ:
                return reply, budget.tries if budget else 0
            budget = budget or Budget(cfg.retry)
            wait = budget.next_wait(reply.retry_after)
            if wait is None:
                return reply, budget.tries
        yield Sleep(wait)


def call(cfg: Config, method: str, path: str, body: Optional[Dict[str, Any]] = None, *,
         retry: int, accept: Tuple[int, ...] = (), lease: bool = False,
         key: Optional[str] = None, wait: bool = False,
         timeout: Optional[float] = -1.0) -> Flow[Reply]:
    """One call: the reply when it is 2xx (or in ``accept``), else its error raised.
    ``timeout`` -1: the client's request timeout."""
    req = Request(method, path, None if body is None else dumps(body), key, wait,
                  cfg.request_timeout if timeout is not None and timeout < 0 else timeout,
                  wait)
    reply, _ = yield from retried(cfg, req, retry)
    if 200 <= reply.status < 300 or reply.status in accept:
        return reply
    raise error_from_reply(reply.status, reply.body, reply.retry_after, lease=lease)


def call_json(cfg: Config, method: str, path: str, body: Optional[Dict[str, Any]] = None, *,
              retry: int, lease: bool = False) -> Flow[Any]:
    reply = yield from call(cfg, method, path, body, retry=retry, lease=lease)
    return loads(reply)


def sem_path(name: str, suffix: str = "") -> str:
    return "/v1/semaphores/" + seg(name) + suffix


# ---- semaphores ----

def limits(body: Dict[str, Any], tenant_max: Optional[int], rate_per_s: Optional[int],
           rate_burst: Optional[int]) -> Dict[str, Any]:
    """The limits given (0 removes one on a configure) added to a PUT's or a PATCH's body."""
    for k, v in (("tenant_max", tenant_max), ("rate_per_s", rate_per_s),
                 ("rate_burst", rate_burst)):
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 2 ** 53:
                raise ValueError("%s must be an int between 0 and 2^53, not %r" % (k, v))
            body[k] = v
    return body


def create(cfg: Config, name: str, capacity: int, tenant_max: Optional[int] = None,
           rate_per_s: Optional[int] = None, rate_burst: Optional[int] = None) -> Flow[bool]:
    """PUT: True when created, False when it existed with this capacity and these limits
    (Conflict else)."""
    body = limits({"capacity": count(capacity, "capacity")}, tenant_max, rate_per_s, rate_burst)
    reply = yield from call(cfg, "PUT", sem_path(name), body, retry=NETWORK)
    return reply.status == 201


def state(cfg: Config, name: str) -> Flow[SemaphoreState]:
    return SemaphoreState.parse((yield from call_json(cfg, "GET", sem_path(name), retry=READ)))


def resize(cfg: Config, name: str, capacity: int) -> Flow[SemaphoreState]:
    doc = yield from call_json(cfg, "PATCH", sem_path(name),
                               {"capacity": count(capacity, "capacity")}, retry=NETWORK)
    return SemaphoreState.parse(doc)


def configure(cfg: Config, name: str, body: Dict[str, Any]) -> Flow[SemaphoreState]:
    """PATCH with the capacity and limits in ``body`` (those absent stay as they are)."""
    if not body:
        raise ValueError("configure: give capacity, tenant_max, rate_per_s or rate_burst")
    return SemaphoreState.parse((yield from call_json(cfg, "PATCH", sem_path(name), body,
                                                      retry=NETWORK)))


def delete(cfg: Config, name: str) -> Flow[None]:
    yield from call(cfg, "DELETE", sem_path(name), retry=NEVER)


def wait_timeout(cfg: Config, timeout: Optional[float]) -> Tuple[Optional[int], Optional[float]]:
    """A call's ``timeout`` (seconds; None or negative: no limit) as timeout_ms, and how long
    its request may then wait for a reply."""
    if timeout is None or timeout < 0:
        return None, None
    ms = to_ms(timeout, "timeout")
    return ms, ms / 1000 + cfg.request_timeout


def wait_idle(cfg: Config, name: str, timeout: Optional[float]) -> Flow[None]:
    ms, limit = wait_timeout(cfg, timeout)
    body = {} if ms is None else {"timeout_ms": ms}
    # wait-idle takes nothing: safe to send again after a network error.
    yield from call(cfg, "POST", sem_path(name, "/wait-idle"), body, retry=NETWORK,
                    wait=ms != 0, timeout=limit)


# ---- acquires ----

def acquire_body(cfg: Config, ttl: Optional[float], owner: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    ttl_ms = cfg.ttl_ms if ttl is None else to_ms(ttl, "ttl", 1)
    if ttl_ms is not None:
        body["ttl_ms"] = ttl_ms
    owner = cfg.owner if owner is None else text(owner, "owner")
    if owner is not None:
        body["owner"] = owner
    return body


def tenant_of(body: Dict[str, Any], tenant: Optional[str]) -> Dict[str, Any]:
    """``tenant`` (whose share the units count to) added to an acquire's or a ticket's body."""
    if tenant is not None:
        if not isinstance(tenant, str) or not tenant:
            raise ValueError("tenant must be a non-empty str, not %r" % (tenant,))
        body["tenant"] = text(tenant, "tenant")
    return body


def ticket_body(cfg: Config, ttl: Optional[float], owner: Optional[str],
                keepalive: Optional[float], tenant: Optional[str]) -> Dict[str, Any]:
    """A new ticket's body but its weight or semaphores."""
    body = tenant_of(acquire_body(cfg, ttl, owner), tenant)
    if keepalive is not None:
        body["keepalive_ms"] = to_ms(keepalive, "keepalive", 1)
    return body


ALL_PATH = "/v1/acquire"


def parts_body(semaphores: Any) -> List[Dict[str, Any]]:
    """The "semaphores" of a request on several: from {name: weight}, or names and
    (name, weight) pairs. Each named once, 1 to 16 (semad checks the count again)."""
    items = semaphores.items() if isinstance(semaphores, dict) else semaphores
    out: List[Dict[str, Any]] = []
    try:
        for it in items:
            name, weight = (it, 1) if isinstance(it, str) else it
            if not isinstance(name, str) or not name:
                raise TypeError
            out.append({"name": name, "weight": weight})
    except (TypeError, ValueError):
        raise ValueError("semaphores: a dict {name: weight}, or names and (name, weight) "
                         "pairs, not %.100r" % (semaphores,)) from None
    if not out:
        raise ValueError("semaphores: at least one")
    for p in out:
        text(p["name"], "name")
        count(p["weight"], "weight")
    return out


def acquire(cfg: Config, path: str, body: Dict[str, Any], timeout: Optional[float],
            key: str, encoded: Optional[bytes] = None) -> Flow[Tuple[Lease, float]]:
    """A blocking acquire: one long-poll request with an Idempotency-Key, sent again with the
    same key after a network error (semad answers a retry with the lease it granted, or the
    retry takes the parked request's place). When it ends without a lease for the caller -
    cancelled, no reply - a grant whose reply was lost is found by the key and released.
    Returns the lease and the monotonic time its request was sent. ``encoded``: the body's
    bytes, when the caller has them (sent as they are when there is no deadline)."""
    ms, _ = wait_timeout(cfg, timeout)
    deadline = None if ms is None else time.monotonic() + ms / 1000
    if deadline is not None:
        body = dict(body)  # its timeout_ms changes per try: the caller's stays as it was
    budget: Optional[Budget] = None
    while True:
        limit: Optional[float] = None
        if deadline is not None:
            left = 0 if ms == 0 else max(0, int((deadline - time.monotonic()) * 1000))
            body["timeout_ms"] = left
            limit = left / 1000 + cfg.request_timeout
        sent = time.monotonic()
        data = encoded if deadline is None and encoded is not None else dumps(body)
        req = Request("POST", path, data, key, ms != 0, limit, True)
        try:
            reply = yield req
        except NetworkError as e:
            budget = budget or Budget(cfg.retry)
            wait = budget.next_wait() if e.retryable else None
            if wait is not None:
                try:
                    yield from pause(wait)
                    continue
                except GeneratorExit:
                    raise
                except BaseException:
                    yield from drop_grant(path, body, key)
                    raise
            yield from drop_grant(path, body, key)
            raise
        except GeneratorExit:
            raise
        except BaseException:  # cancelled (the connection is closed: semad drops the waiter)
            yield from drop_grant(path, body, key)
            raise
        if 200 <= reply.status < 300:
            return (yield from grant_of(reply)), sent
        raise error_from_reply(reply.status, reply.body, reply.retry_after, weighed=True)


def grant_of(reply: Reply) -> Flow[Lease]:
    """The lease of an acquire's reply; one that cannot be read is released, not kept."""
    try:
        return Lease.parse(loads(reply))
    except ProtocolError:
        doc: Any = None
        try:
            doc = json.loads(reply.body)
        except ValueError:
            pass
        if isinstance(doc, dict) and isinstance(doc.get("lease"), str) and doc["lease"]:
            yield from quiet_release(doc["lease"])
        raise


def drop_grant(path: str, body: Dict[str, Any], key: str) -> Flow[None]:
    """After an acquire ended without its reply: ask again with the same key and no wait,
    and release what that returns. One try each (the acquire's retries spent the budget);
    a grant not found ends with its ttl."""
    try_body = dict(body, timeout_ms=0)
    try:
        reply = yield from send(Request("POST", path, dumps(try_body), key, False,
                                        DROP_TIMEOUT, False))
        if reply.status == 200:
            lease = json.loads(reply.body).get("lease")
            if isinstance(lease, str) and lease:
                yield from quiet_release(lease)
    except (NetworkError, ValueError, AttributeError):
        pass


def quiet_release(lease_id: str) -> Flow[None]:
    try:
        yield from send(Request("DELETE", "/v1/leases/" + seg(lease_id), None, None, False,
                                DROP_TIMEOUT, False))
    except NetworkError:
        pass


# ---- leases ----

def lease_path(lease_id: str, suffix: str = "") -> str:
    return "/v1/leases/" + seg(lease_id, "lease id") + suffix


def release(cfg: Config, lease_id: str) -> Flow[None]:
    """DELETE the lease, sent again after a network error or a 503; "already released" on a
    retry means an earlier try got through. Any other end raises LeaseLost."""
    req = Request("DELETE", lease_path(lease_id), None, None, False, cfg.request_timeout, False)
    reply, tries = yield from retried(cfg, req, READ)
    if 200 <= reply.status < 300:
        return
    err = error_from_reply(reply.status, reply.body, reply.retry_after, lease=True)
    if tries > 0 and err.code == "lease_released":
        return
    raise err


def renew(cfg: Config, lease_id: str, ttl_ms: int, timeout: float,
          retry: int) -> Flow[Lease]:
    body = dumps({"ttl_ms": ttl_ms})
    req = Request("POST", lease_path(lease_id, "/renew"), body, None, False, timeout, False)
    reply, _ = yield from retried(cfg, req, retry)
    if not 200 <= reply.status < 300:
        raise error_from_reply(reply.status, reply.body, reply.retry_after, lease=True)
    return Lease.parse(loads(reply))


def lease_get(cfg: Config, lease_id: str) -> Flow[Lease]:
    return Lease.parse((yield from call_json(cfg, "GET", lease_path(lease_id), retry=READ,
                                             lease=True)))


def revoke(cfg: Config, lease_id: str) -> Flow[None]:
    yield from call(cfg, "POST", lease_path(lease_id, "/revoke"), retry=NEVER, lease=True)


def lock_state(cfg: Config, key: str) -> Flow[LockState]:
    path = "/v1/locks/" + seg(key, "key")
    return LockState.parse((yield from call_json(cfg, "GET", path, retry=READ)))


# ---- tickets ----

def ticket_path(ticket_id: str, suffix: str = "") -> str:
    return "/v1/tickets/" + seg(ticket_id, "ticket id") + suffix


TICKETS_PATH = "/v1/tickets"


def ticket_take(cfg: Config, path: str, body: Dict[str, Any], key: str) -> Flow[TicketState]:
    """A place in the line (``path``: a semaphore's tickets, or TICKETS_PATH for a ticket
    on several), sent again after a network error with one Idempotency-Key (so a retry
    never takes a second place)."""
    req = Request("POST", path, dumps(body), key, False, cfg.request_timeout, False)
    reply, _ = yield from retried(cfg, req, NETWORK)
    if not 200 <= reply.status < 300:
        raise error_from_reply(reply.status, reply.body, reply.retry_after, weighed=True)
    return TicketState.parse(loads(reply))


def ticket_get(cfg: Config, ticket_id: str, wait: Optional[float]) -> Flow[TicketState]:
    path, limit = ticket_path(ticket_id), cfg.request_timeout
    if wait is not None and wait > 0:
        ms = to_ms(min(wait, 300.0), "wait")
        path += "?wait=%dms" % ms
        limit += ms / 1000
    req = Request("GET", path, None, None, wait is not None and wait > 0, limit, True)
    reply, _ = yield from retried(cfg, req, READ)
    if not 200 <= reply.status < 300:
        raise error_from_reply(reply.status, reply.body, reply.retry_after)
    return TicketState.parse(loads(reply))


def ticket_leave(cfg: Config, ticket_id: str) -> Flow[None]:
    yield from call(cfg, "DELETE", ticket_path(ticket_id), retry=READ, accept=(404, 410))


def wait_turn(cfg: Config, ticket: TicketState,
              timeout: Optional[float]) -> Flow[TicketState]:
    """Follows the ticket's stream until it is granted (its state then), emitting each new
    position. The stream starts with the ticket's state now and names each state by its
    event id, so no change is missed between two reads (a long poll could miss one). A
    timeout leaves the ticket in line."""
    if ticket.status == "granted":
        return ticket
    ms, _ = wait_timeout(cfg, timeout)
    deadline = None if ms is None else time.monotonic() + ms / 1000
    shown = [ticket.position]
    granted: List[TicketState] = []

    def on_event(raw: Optional[ev.RawEvent], stream: Stream, connected: bool) -> Flow[bool]:
        st = yield from ticket_event(raw)
        if st is None:
            return False
        if st.status == "granted":
            granted.append(st)
            return True
        if st.position != shown[0]:
            shown[0] = st.position
            yield Emit(st)
        return False

    try:
        yield from stream_events(cfg, ticket_path(ticket.id, "/events"), None, on_event,
                                 deadline)
    except StreamTimeout:
        raise Timeout("ticket %s was not granted within %gs (it keeps its place)"
                      % (ticket.id, (ms or 0) / 1000), code="timeout") from None
    return granted[0]


def ticket_event(raw: Optional[ev.RawEvent]) -> Flow[Optional[TicketState]]:
    """The state of one event of a ticket's stream (None for a reply that is not a
    stream); ``ended`` raises TicketEnded."""
    if raw is None:
        return None
    if raw.event == "ended":
        raise error_from_reply(410, raw.data.encode())
    try:
        doc = json.loads(raw.data)
    except ValueError:
        raise ProtocolError("a ticket event that is not JSON: %.200r" % raw.data,
                            code="protocol") from None
    return TicketState.parse(doc, raw.id)
    yield  # a flow


# ---- event streams ----

OnEvent = Callable[[Optional[ev.RawEvent], Stream, bool], Flow[bool]]


def stream_events(cfg: Config, path: str, last: Optional[str], on_event: OnEvent,
                  deadline: Optional[float] = None) -> Flow[None]:
    """Follows a stream, reconnecting with Last-Event-ID after a drop. ``on_event(raw,
    connected)`` is a flow: it returns True to end the stream. Until the first connection,
    no reply within the retry budget is a NetworkError; a 4xx is raised at once. Past
    ``deadline`` (monotonic), StreamTimeout."""
    connected = False
    give_up = time.monotonic() + cfg.retry
    delay = BACKOFF_FIRST
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            raise StreamTimeout()
        try:
            stream = yield OpenStream(path, last)
        except NetworkError as e:
            if not connected and (not e.retryable or time.monotonic() + delay > give_up):
                raise
            yield from pause(delay)
            delay = min(delay * 2, STREAM_BACKOFF_MAX)
            continue
        if not 200 <= stream.status < 300:
            done = yield from on_event(None, stream, connected)
            if done:
                return
            raise error_from_reply(stream.status, stream.body)
        connected, delay = True, BACKOFF_FIRST
        parser = ev.SSEParser()
        try:
            while True:
                left = None if deadline is None else max(0.001, deadline - time.monotonic())
                line = yield ReadLine(stream, left)
                if not line:
                    break  # the server ended the stream (semad stopping): resume
                raw = parser.feed(line)
                if raw is None:
                    continue
                if raw.id:
                    last = raw.id
                if (yield from on_event(raw, stream, connected)):
                    return
        except NetworkError:
            pass  # the connection dropped: resume below
        yield CloseStream(stream)
        yield from pause(delay)


def watch(cfg: Config, name: str, last_event_id: Optional[str]) -> Flow[None]:
    """A semaphore's events (emitted), until ``deleted``; a semaphore that vanished while
    the stream was down ends with a Deleted(missed=True)."""
    path = sem_path(name, "/events")

    def on_event(raw: Optional[ev.RawEvent], stream: Stream, connected: bool) -> Flow[bool]:
        if raw is None:  # not a stream
            if stream.status == 404 and connected:
                data = {"name": name, "missed": True}
                yield Emit(ev.Deleted("deleted", None, name, data, missed=True))
                return True
            return False
        yield Emit(ev.parse_event(raw))
        return raw.event == "deleted"

    yield from stream_events(cfg, path, last_event_id, on_event)


def ticket_updates(cfg: Config, ticket_id: str, last_event_id: Optional[str]) -> Flow[None]:
    """A ticket's states (emitted): now, then each change; ends after the grant; a ticket
    that ends while waiting raises TicketEnded."""
    path = ticket_path(ticket_id, "/events")

    def on_event(raw: Optional[ev.RawEvent], stream: Stream, connected: bool) -> Flow[bool]:
        ticket = yield from ticket_event(raw)
        if ticket is None:
            return False
        yield Emit(ticket)
        return ticket.status == "granted"

    yield from stream_events(cfg, path, last_event_id, on_event)


# ---- the legacy API (the original service's five routes) ----

def legacy_create(cfg: Config, name: str, value: int) -> Flow[bool]:
    seg(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2 ** 53:
        raise ValueError("value must be an int between 0 and 2^53, not %r" % (value,))
    reply = yield from call(cfg, "POST", "/semaphore", {"name": name, "value": value},
                            retry=NEVER, accept=(303,))
    return reply.status != 303


def legacy_delete(cfg: Config, name: str) -> Flow[bool]:
    reply = yield from call(cfg, "DELETE", "/semaphore/" + seg(name), retry=NEVER,
                            accept=(404,))
    return reply.status != 404


def legacy_value(cfg: Config, name: str) -> Flow[int]:
    doc = yield from call_json(cfg, "GET", "/semaphore/value/" + seg(name), retry=READ)
    return legacy_int(doc)


def legacy_up(cfg: Config, name: str) -> Flow[int]:
    seg(name)
    doc = yield from call_json(cfg, "POST", "/semaphore/up", {"name": name}, retry=NEVER)
    return legacy_int(doc)


def legacy_down(cfg: Config, name: str) -> Flow[Optional[int]]:
    seg(name)
    reply = yield from call(cfg, "POST", "/semaphore/down", {"name": name}, retry=NEVER,
                            accept=(409,))
    return None if reply.status == 409 else legacy_int(loads(reply))


def legacy_int(doc: Any) -> int:
    v = doc.get("value") if isinstance(doc, dict) else None
    if not isinstance(v, int) or isinstance(v, bool):
        raise ProtocolError("unexpected legacy reply: %.200r" % doc, code="protocol")
    return v

