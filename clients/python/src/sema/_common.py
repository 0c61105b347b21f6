# SPDX-License-Identifier: MIT
"""_common.py - what a permit and a ticket are in both clients: their fields, the deadline a
lease is held to, and how a granted ticket becomes a permit. The clients add the I/O."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

from ._types import Estimate, Lease, Part, TicketPart, TicketState
from .errors import LeaseLost

P = TypeVar("P")


class PermitFields:
    """A held lease's fields, its loss, and when it must be renewed by."""

    lease: str
    """The lease id."""
    name: str
    weight: int
    fence: int
    """Strictly increasing per semaphore: hand it to the resource you protect."""
    ttl: float
    expires_at: float
    """The expiry on semad's clock (epoch seconds), moved on by each renewal."""
    acquired_at: float
    owner: Optional[str]
    key: Optional[str]
    mode: Optional[str]
    tenant: Optional[str]
    parts: Optional[Tuple[Part, ...]]
    """A lease on several semaphores (acquire_all): each one's name, weight and fence
    (``name``, ``weight`` and ``fence`` are the first's); None on one semaphore."""

    def _fields(self, lease: Lease, sent: float, left: Optional[float]) -> Tuple[float, float]:
        """Takes the lease's fields; returns (local deadline, first renewal), monotonic."""
        self.lease, self.name, self.weight = lease.lease, lease.name, lease.weight
        self.fence, self.ttl, self.expires_at = lease.fence, lease.ttl, lease.expires_at
        self.acquired_at, self.owner = lease.acquired_at, lease.owner
        self.key, self.mode = lease.key, lease.mode
        self.tenant, self.parts = lease.tenant, lease.parts
        self._error: Optional[LeaseLost] = None
        self._released = False
        self._gen = 0  # moves on when a scheduled renewal no longer stands
        now = time.monotonic()
        # The ttl runs from the grant, between the send and now; a long-poll may have
        # waited long before it: take the grant as at most min(1 s, ttl/4) before the reply.
        deadline = max(sent, now - min(1.0, self.ttl / 4)) + self.ttl
        first = now + self.ttl / 3
        if left is not None:  # a lease granted before this process saw it: `left` of its ttl
            left = max(left, 0.1)
            deadline = min(deadline, now + left)
            first = min(first, now + left / 2)
        return deadline, first

    def __repr__(self) -> str:
        return "<%s %s of %r weight=%d fence=%d%s>" % (
            type(self).__name__, self.lease, self.key or self.name, self.weight, self.fence,
            " lost" if self._error is not None else " released" if self._released else "")

    @property
    def fences(self) -> Dict[str, int]:
        """The fence of each semaphore it holds units of, by name."""
        if self.parts is None:
            return {self.name: self.fence}
        return {p.name: p.fence for p in self.parts}

    @property
    def released(self) -> bool:
        return self._released

    @property
    def error(self) -> Optional[LeaseLost]:
        """Why the lease was lost (None while it is not)."""
        return self._error


def unreachable(lease: str) -> LeaseLost:
    return LeaseLost("lease %s: no renewal reached semad before the ttl ran out" % lease,
                     code="unreachable")


class TicketFields:
    """A ticket's latest state (``state``) and the attributes that mirror it."""

    state: TicketState

    @property
    def id(self) -> str:
        return self.state.id

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def status(self) -> str:
        """``"waiting"`` or ``"granted"``."""
        return self.state.status

    @property
    def position(self) -> Optional[int]:
        """1 = next in line; None once granted."""
        return self.state.position

    @property
    def estimate(self) -> Optional[Estimate]:
        return self.state.estimate

    @property
    def lease(self) -> Optional[Lease]:
        return self.state.lease

    @property
    def tenant(self) -> Optional[str]:
        """The tenant it named (None: none)."""
        return self.state.tenant

    @property
    def parts(self) -> Optional[Tuple[TicketPart, ...]]:
        """A ticket on several semaphores (take_ticket_all): each one's name and weight
        (``name`` is the first's); None on one semaphore."""
        return self.state.parts

    def __repr__(self) -> str:
        return "<%s %s %s position=%s>" % (type(self).__name__, self.state.id,
                                           self.state.status, self.state.position)

    def _set(self, st: TicketState) -> None:
        self.state = st


def ticket_permit(client: Any, st: TicketState, make: Callable[..., P]) -> P:
    """A granted ticket's lease as a permit. The lease may have been granted a while before
    this process read it (a ticket is collected by its next read): its ttl is counted from
    the expiry semad gave, by this host's wall clock, never for more than the ttl."""
    lease = st.lease
    if lease is None:
        raise TypeError("the ticket is not granted")
    return make(client, lease, time.monotonic(), None, lease.expires_at - time.time())
