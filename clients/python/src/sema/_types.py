# SPDX-License-Identifier: MIT
"""_types.py - what semad's replies describe (leases, states, tickets), parsed and typed."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .errors import ProtocolError


def _bad(what: str, d: Any) -> ProtocolError:
    return ProtocolError("unexpected %s from semad: %.200r" % (what, d), code="protocol")


def _int(d: Mapping[str, Any], key: str, what: str) -> int:
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise _bad(what, d)
    return v


def _opt_int(d: Mapping[str, Any], key: str, what: str) -> Optional[int]:
    return None if d.get(key) is None else _int(d, key, what)


def _str(d: Mapping[str, Any], key: str, what: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise _bad(what, d)
    return v


def _opt_str(d: Mapping[str, Any], key: str, what: str) -> Optional[str]:
    return None if d.get(key) is None else _str(d, key, what)


def _obj(d: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(d, dict):
        raise _bad(what, d)
    return d


def _list(d: Mapping[str, Any], key: str, what: str) -> List[Mapping[str, Any]]:
    v = d.get(key, [])
    if not isinstance(v, list):
        raise _bad(what, d)
    return [_obj(x, what) for x in v]


@dataclass(frozen=True)
class Part:
    """One semaphore of a lease on several: its name, the units held there and its fence."""

    name: str
    weight: int
    fence: int


@dataclass
class Lease:
    """A lease as semad describes it. Times are seconds: ``ttl`` a duration,
    ``expires_at`` and ``acquired_at`` on the server's clock (epoch, as time.time()). A
    lease on several semaphores (Client.acquire_all) has its ``parts``; ``name``,
    ``weight`` and ``fence`` are then its first part's. ``fences`` maps each semaphore
    of the lease to its fence."""

    lease: str
    name: str
    weight: int
    fence: int
    ttl: float
    expires_at: float
    acquired_at: float
    owner: Optional[str] = None
    key: Optional[str] = None
    mode: Optional[str] = None
    tenant: Optional[str] = None
    parts: Optional[Tuple[Part, ...]] = None

    @property
    def fences(self) -> Dict[str, int]:
        if self.parts is None:
            return {self.name: self.fence}
        return {p.name: p.fence for p in self.parts}

    @classmethod
    def parse(cls, doc: Any) -> Lease:
        """Every acquire's reply goes through here: checked field by field, briefly."""
        parts = None
        try:
            lease = doc["lease"]
            if "semaphores" in doc:
                parts = _parts(doc)
                name, weight, fence = parts[0].name, parts[0].weight, parts[0].fence
            else:
                name, weight, fence = doc["name"], doc["weight"], doc["fence"]
            ttl_ms, expires = doc["ttl_ms"], doc["expires_at"]
            acquired = doc.get("acquired_at") or 0
            owner, key, mode = doc.get("owner"), doc.get("key"), doc.get("mode")
            tenant = doc.get("tenant")
        except (KeyError, TypeError, AttributeError):
            raise _bad("lease", doc) from None
        if type(lease) is not str or not lease or type(name) is not str or \
                type(weight) is not int or type(fence) is not int or \
                type(ttl_ms) is not int or ttl_ms <= 0 or type(expires) is not int or \
                type(acquired) is not int or not _none_or_str(owner, key, mode, tenant):
            raise _bad("lease", doc)
        return cls(lease, name, weight, fence, ttl_ms / 1000, expires / 1000, acquired / 1000,
                   owner, key, mode, tenant, parts)


def _semaphores(doc: Mapping[str, Any], what: str) -> List[Mapping[str, Any]]:
    """The "semaphores" of a lease or a ticket on several: at least one object."""
    v = doc["semaphores"]
    if not isinstance(v, list) or not v:
        raise _bad(what, doc)
    return [_obj(x, what) for x in v]


def _parts(doc: Mapping[str, Any]) -> Tuple[Part, ...]:
    """A lease's parts: {name, weight, fence} each."""
    w = "lease"
    return tuple(Part(_str(p, "name", w), _int(p, "weight", w), _int(p, "fence", w))
                 for p in _semaphores(doc, w))


def _none_or_str(*values: Any) -> bool:
    return all(v is None or type(v) is str for v in values)


@dataclass(frozen=True)
class Holder:
    """A holder in a state: its lease id, weight, owner, times (epoch seconds) and fence;
    ``mode`` for a lock's holders."""

    lease: str
    weight: int
    owner: Optional[str]
    acquired_at: float
    expires_at: float
    fence: int
    mode: Optional[str] = None
    tenant: Optional[str] = None
    multi: bool = False
    """Its lease is on several semaphores (this is its part here)."""

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> Holder:
        return cls(lease=_str(d, "lease", "holder"), weight=_int(d, "weight", "holder"),
                   owner=_opt_str(d, "owner", "holder"),
                   acquired_at=_int(d, "acquired_at", "holder") / 1000,
                   expires_at=_int(d, "expires_at", "holder") / 1000,
                   fence=_int(d, "fence", "holder"), mode=_opt_str(d, "mode", "holder"),
                   tenant=_opt_str(d, "tenant", "holder"), multi=d.get("multi") is True)


@dataclass(frozen=True)
class Waiter:
    """A waiter in queue order: ``position`` 0 is the head; ``weight`` 0 for a wait_idle;
    ``kind`` is ``"wait_idle"``, ``"ticket"`` or None (a long-poll acquire)."""

    position: int
    weight: int
    owner: Optional[str]
    since: float
    kind: Optional[str] = None
    mode: Optional[str] = None
    tenant: Optional[str] = None
    multi: bool = False
    """A request on several semaphores (this is its place here)."""

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> Waiter:
        return cls(position=_int(d, "position", "waiter"), weight=_int(d, "weight", "waiter"),
                   owner=_opt_str(d, "owner", "waiter"), since=_int(d, "since", "waiter") / 1000,
                   kind=_opt_str(d, "kind", "waiter"), mode=_opt_str(d, "mode", "waiter"),
                   tenant=_opt_str(d, "tenant", "waiter"), multi=d.get("multi") is True)


@dataclass(frozen=True)
class TenantState:
    """A tenant of a semaphore (one that holds or waits there): ``tenant`` None for the
    requests that named none."""

    tenant: Optional[str]
    held: int
    waiting: int
    waiting_weight: int

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> TenantState:
        w = "tenant"
        return cls(tenant=_opt_str(d, "tenant", w), held=_int(d, "held", w),
                   waiting=_int(d, "waiting", w), waiting_weight=_int(d, "waiting_weight", w))


@dataclass(frozen=True)
class SemaphoreState:
    """GET /v1/semaphores/{name}: ``available`` may be below 0 after a shrink, above the
    capacity after a legacy up; ``fence`` is the last one handed out."""

    name: str
    capacity: int
    available: int
    held: int
    fence: int
    waiting: int
    waiting_weight: int
    holders: List[Holder]
    waiters: List[Waiter]
    legacy: bool = False
    truncated: bool = False
    tenant_max: Optional[int] = None
    """The most one tenant may hold (None: no cap)."""
    rate_per_s: Optional[int] = None
    """Units granted per second at most (None: no rate), ``rate_burst`` at once after a
    pause; ``tokens`` the units the bucket holds now."""
    rate_burst: Optional[int] = None
    tokens: Optional[int] = None
    tenants: List[TenantState] = field(default_factory=list)
    """Each tenant that holds or waits, by name."""

    @classmethod
    def parse(cls, doc: Any) -> SemaphoreState:
        d = _obj(doc, "semaphore state")
        w = "semaphore state"
        return cls(name=_str(d, "name", w), capacity=_int(d, "capacity", w),
                   available=_int(d, "available", w), held=_int(d, "held", w),
                   fence=_int(d, "fence", w), waiting=_int(d, "waiting", w),
                   waiting_weight=_int(d, "waiting_weight", w),
                   holders=[Holder.parse(h) for h in _list(d, "holders", w)],
                   waiters=[Waiter.parse(x) for x in _list(d, "waiters", w)],
                   legacy=d.get("legacy") is True, truncated=d.get("truncated") is True,
                   tenant_max=_opt_int(d, "tenant_max", w),
                   rate_per_s=_opt_int(d, "rate_per_s", w),
                   rate_burst=_opt_int(d, "rate_burst", w), tokens=_opt_int(d, "tokens", w),
                   tenants=[TenantState.parse(t) for t in _list(d, "tenants", w)])


@dataclass(frozen=True)
class LockState:
    """GET /v1/locks/{key}: ``readers`` the shared holders now, ``max_readers`` semad's
    --lock-readers."""

    key: str
    readers: int
    max_readers: int
    holders: List[Holder]
    waiters: List[Waiter]
    truncated: bool = False

    @classmethod
    def parse(cls, doc: Any) -> LockState:
        d = _obj(doc, "lock state")
        w = "lock state"
        return cls(key=_str(d, "key", w), readers=_int(d, "readers", w),
                   max_readers=_int(d, "max_readers", w),
                   holders=[Holder.parse(h) for h in _list(d, "holders", w)],
                   waiters=[Waiter.parse(x) for x in _list(d, "waiters", w)],
                   truncated=d.get("truncated") is True)


@dataclass(frozen=True)
class Estimate:
    """A ticket's estimated wait from now, in seconds: the median and the 90th percentile."""

    p50: float
    p90: float


@dataclass(frozen=True)
class TicketPart:
    """One semaphore of a ticket on several: its name and the units asked for there."""

    name: str
    weight: int


@dataclass(frozen=True)
class TicketState:
    """A ticket as semad last described it. Waiting: ``position`` (1 = next in line),
    ``ahead_weight``, ``estimate`` (None until the semaphore has history). Granted:
    ``lease``. ``poll_after`` and ``keepalive`` are seconds; ``event_id`` is the stream
    id of this state (from ``updates()``). ``tenant`` is the one the ticket named (None:
    none). A ticket on several semaphores (Client.take_ticket_all) has its ``parts``;
    ``name`` and ``weight`` are then its first part's, and ``position``, ``ahead_weight``
    and ``estimate`` those of the line where it stands furthest back."""

    id: str
    name: str
    status: str
    weight: int
    position: Optional[int]
    ahead_weight: Optional[int]
    estimate: Optional[Estimate]
    poll_after: float
    keepalive: float
    lease: Optional[Lease]
    event_id: Optional[str] = None
    tenant: Optional[str] = None
    parts: Optional[Tuple[TicketPart, ...]] = None

    @property
    def weights(self) -> Dict[str, int]:
        """The units asked for on each semaphore, by name."""
        if self.parts is None:
            return {self.name: self.weight}
        return {p.name: p.weight for p in self.parts}

    @classmethod
    def parse(cls, doc: Any, event_id: Optional[str] = None) -> TicketState:
        d = _obj(doc, "ticket")
        w = "ticket"
        status = _str(d, "status", w)
        if status not in ("waiting", "granted"):
            raise _bad(w, d)
        est = d.get("estimate_ms")
        estimate = None
        if est is not None:
            e = _obj(est, w)
            estimate = Estimate(_int(e, "p50", w) / 1000, _int(e, "p90", w) / 1000)
        parts = None
        if "semaphores" in d:
            parts = tuple(TicketPart(_str(p, "name", w), _int(p, "weight", w))
                          for p in _semaphores(d, w))
            name, weight = parts[0].name, parts[0].weight
        else:
            name, weight = _str(d, "name", w), _int(d, "weight", w)
        return cls(id=_str(d, "ticket", w), name=name, status=status, weight=weight,
                   position=_opt_int(d, "position", w),
                   ahead_weight=_opt_int(d, "ahead_weight", w), estimate=estimate,
                   poll_after=_int(d, "poll_after_ms", w) / 1000,
                   keepalive=_int(d, "keepalive_ms", w) / 1000,
                   lease=Lease.parse(d.get("lease")) if status == "granted" else None,
                   event_id=event_id, tenant=_opt_str(d, "tenant", w), parts=parts)
