# SPDX-License-Identifier: MIT
"""sema - a client for semad, the sema semaphore server: fleet-wide weighted semaphores
with leases, keyed reader/writer locks, tickets and event streams, synchronous
(``sema.Client``) and for asyncio (``sema.AsyncClient``). Standard library only."""
from ._async import (AsyncClient, AsyncEventStream, AsyncKeyedLock, AsyncLegacy, AsyncPermit,
                     AsyncPermitContext, AsyncSemaphore, AsyncTicket)
from ._client import (Client, EventStream, KeyedLock, Legacy, Permit, PermitContext, Semaphore,
                      Ticket, TicketUpdates)
from ._http import Cancel
from ._types import (Estimate, Holder, Lease, LockState, Part, SemaphoreState, TenantState,
                     TicketPart, TicketState, Waiter)
from ._version import __version__
from .errors import (Busy, Cancelled, Conflict, Forbidden, Gone, InvalidRequest, LeaseLost,
                     LimitReached, NetworkError, NotFound, NotSupported, Overflow,
                     ProtocolError, SemaError, SemaphoreDeleted, ServerError, TicketEnded,
                     Timeout, TooHeavy, Unauthorized, Unavailable)
from . import events

__all__ = [
    "AsyncClient", "AsyncEventStream", "AsyncKeyedLock", "AsyncLegacy", "AsyncPermit",
    "AsyncPermitContext", "AsyncSemaphore", "AsyncTicket",
    "Client", "EventStream", "KeyedLock", "Legacy", "Permit", "PermitContext", "Semaphore",
    "Ticket", "TicketUpdates", "Cancel",
    "Estimate", "Holder", "Lease", "LockState", "Part", "SemaphoreState", "TenantState",
    "TicketPart", "TicketState", "Waiter",
    "Busy", "Cancelled", "Conflict", "Forbidden", "Gone", "InvalidRequest", "LeaseLost",
    "LimitReached", "NetworkError", "NotFound", "NotSupported", "Overflow", "ProtocolError",
    "SemaError", "SemaphoreDeleted", "ServerError", "TicketEnded", "Timeout", "TooHeavy",
    "Unauthorized", "Unavailable", "events", "__version__",
]
