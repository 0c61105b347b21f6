# SPDX-License-Identifier: MIT
"""errors.py - the exceptions of the sema client: one class per kind of answer from semad."""
from __future__ import annotations

import email.utils
import json
import time
from typing import Any, Dict, Optional


class SemaError(Exception):
    """Every error of the client.

    ``code`` is semad's problem code (``timeout``, ``not_found``, ... as in
    docs/http-api.md), or the client's own (``network``, ``unreachable``, ``cancelled``,
    ``protocol``); ``status`` the HTTP status (0 when no reply came); ``detail`` the
    problem's text; ``problem`` the whole problem document (or None); ``retry_after``
    the seconds the reply's Retry-After asked for (or None).
    """

    def __init__(self, message: str, *, code: str, status: int = 0,
                 detail: Optional[str] = None, problem: Optional[Dict[str, Any]] = None,
                 retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.detail = detail
        self.problem = problem
        self.retry_after = retry_after


class InvalidRequest(SemaError, ValueError):
    """400 and the other 4xx without a class of their own: a bad field, a name too long,
    an Idempotency-Key in use with another weight (405, 413, 414, 431 too)."""


class TooHeavy(InvalidRequest):
    """An acquire or a ticket heavier than the capacity (or than a capacity shrunk while
    it waited): rejected at once, never queued."""


class NotFound(SemaError, LookupError):
    """404: no such semaphore, lease, ticket or held lock key."""


class Conflict(SemaError):
    """409 ``conflict``: the semaphore exists with another capacity."""


class Busy(SemaError):
    """409 ``unavailable``: a try (timeout 0) that could not be granted at once."""


class Timeout(SemaError, TimeoutError):
    """409 ``timeout``: not granted within the timeout (also a ticket's wait_turn)."""


class Overflow(SemaError):
    """409 ``overflow``, or ``release(n)`` without a permit of that weight."""


class Gone(SemaError):
    """410: the thing existed but has ended."""


class SemaphoreDeleted(Gone):
    """410 ``deleted``: the semaphore was deleted while the request waited."""


class LeaseLost(Gone):
    """A held lease ended: ``lease_expired``, ``lease_revoked``, ``lease_released``,
    ``deleted`` (its semaphore), ``not_found``, or ``unreachable`` (no renewal reached
    semad before the ttl ran out)."""


class TicketEnded(Gone):
    """410 ``ticket_ended``: the ticket left the line or its lease ended (detail says why)."""


class LimitReached(SemaError):
    """429 ``limit_reached``: too many semaphores, parked waiters or lock keys."""


class Unauthorized(SemaError, PermissionError):
    """401: no token, or one semad does not know (``token=`` or ``SEMA_TOKEN``)."""


class Forbidden(SemaError, PermissionError):
    """403: the token lacks the right the call needs, names something outside its
    prefixes, or acts on another token's lease or ticket."""


class NotSupported(SemaError):
    """501 ``not_supported``: semad's back end does not serve this (tickets)."""


class ServerError(SemaError):
    """A 5xx other than 503 (``internal``, ``store_corrupt``, a gateway's 502)."""


class Unavailable(SemaError):
    """503: semad could not serve the request now (``shutting_down``,
    ``store_unavailable``, ``unavailable_retry``, ``out_of_memory``, too many
    connections), after the retries the call allows."""


class NetworkError(Unavailable, ConnectionError):
    """No reply: semad could not be reached, the connection broke, or no reply came within
    the request timeout. ``retryable`` says whether the client may send it again. With no
    reply there is no server's detail: ``detail`` is the client's own explanation (the
    message), as for every other error."""

    def __init__(self, message: str, *, code: str = "network", retryable: bool = True) -> None:
        super().__init__(message, code=code, detail=message)
        self.retryable = retryable


class Cancelled(SemaError):
    """A ``sema.Cancel`` fired while the call waited (the synchronous client)."""


class ProtocolError(SemaError):
    """A reply that is not what docs/http-api.md documents."""


_BY_CODE = {
    "timeout": Timeout,
    "unavailable": Busy,
    "not_found": NotFound,
    "conflict": Conflict,
    "deleted": SemaphoreDeleted,
    "lease_expired": LeaseLost,
    "lease_revoked": LeaseLost,
    "lease_released": LeaseLost,
    "overflow": Overflow,
    "limit_reached": LimitReached,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "ticket_ended": TicketEnded,
    "not_supported": NotSupported,
    "gone": Gone,
}

# Replies without a problem document (the legacy API, a proxy): the code by status.
_CODE_BY_STATUS = {
    400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 408: "request_timeout", 409: "conflict", 410: "gone",
    413: "body_too_large", 414: "uri_too_long", 429: "limit_reached",
    431: "headers_too_large", 503: "server_unavailable",
}

# Codes that end a lease: on a lease route they are a LeaseLost.
LEASE_ENDED = frozenset({"lease_expired", "lease_revoked", "lease_released", "deleted",
                         "not_found"})


def retry_after_seconds(value: Optional[str]) -> Optional[float]:
    """A Retry-After header (delay-seconds or an HTTP-date, RFC 9110) in seconds from now;
    None when absent or unreadable."""
    if value is None:
        return None
    v = value.strip()
    if v.isdigit():
        return float(v)
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_from_reply(status: int, body: bytes, retry_after: Optional[float] = None, *,
                     lease: bool = False, weighed: bool = False) -> SemaError:
    """The exception for a reply that is not a success. ``lease``: the request was about a
    held lease (its end is a LeaseLost); ``weighed``: it carried a weight (an acquire, a
    ticket), so a 400 about the weight is TooHeavy."""
    problem: Optional[Dict[str, Any]] = None
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and isinstance(doc.get("code"), str):
            problem = doc
    except ValueError:
        pass
    text = body.decode("utf-8", "replace").strip()
    code = str(problem["code"]) if problem else _CODE_BY_STATUS.get(status, "http_%d" % status)
    detail = problem.get("detail") if problem else (text or None)
    if detail is not None and not isinstance(detail, str):
        detail = str(detail)
    message = "semad: %d %s%s" % (status, code, ": " + detail if detail else "")
    kind = _error_class(status, code, detail, lease, weighed)
    return kind(message, code=code, status=status, detail=detail, problem=problem,
                retry_after=retry_after)


def _error_class(status: int, code: str, detail: Optional[str], lease: bool,
                 weighed: bool) -> type[SemaError]:
    if lease and code in LEASE_ENDED:
        return LeaseLost
    if weighed and code == "invalid_request" and (detail or "").startswith("weight"):
        return TooHeavy
    kind = _BY_CODE.get(code)
    if kind is not None:
        return kind
    if status == 503:
        return Unavailable
    if status >= 500:
        return ServerError
    if 400 <= status < 500 and status != 408:
        return InvalidRequest
    return SemaError
