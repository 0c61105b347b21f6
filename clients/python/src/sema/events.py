# SPDX-License-Identifier: MIT
"""events.py - a semaphore's events as typed values, and the Server-Sent Events parser they
are read with (the subset semad sends: id, event, data, comments)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = ["Event", "LeaseEvent", "Granted", "Released", "Expired", "Revoked", "Resized",
           "WaiterEvent", "Queued", "Left", "Deleted", "Reset", "RawEvent", "SSEParser",
           "parse_event"]


@dataclass(frozen=True)
class Event:
    """One event of ``watch(name)``. ``id`` is its resume point (``<uid>-<seq>``, sent
    back as Last-Event-ID); ``data`` the event's JSON object as semad sent it."""

    type: str
    id: Optional[str]
    name: str
    data: Dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class LeaseEvent(Event):
    """An event about one lease: its id, weight, fence and owner."""

    lease: str
    weight: int
    fence: int
    owner: Optional[str]


@dataclass(frozen=True)
class Granted(LeaseEvent):
    """A lease was granted."""


@dataclass(frozen=True)
class Released(LeaseEvent):
    """A lease was released."""


@dataclass(frozen=True)
class Expired(LeaseEvent):
    """A lease's ttl ran out."""


@dataclass(frozen=True)
class Revoked(LeaseEvent):
    """An admin revoked a lease."""


@dataclass(frozen=True)
class Resized(Event):
    """The capacity changed."""

    capacity: int


@dataclass(frozen=True)
class WaiterEvent(Event):
    """An event about one waiter: its weight, owner, when it came (``since``, ms since the
    epoch) and ``kind`` (None for an acquire, "ticket" or "wait_idle"); ``waiting`` and
    ``waiting_weight`` are the queue's count and weight after it."""

    weight: int
    owner: Optional[str]
    since: int
    kind: Optional[str]
    waiting: int
    waiting_weight: int


@dataclass(frozen=True)
class Queued(WaiterEvent):
    """A waiter joined the queue."""


@dataclass(frozen=True)
class Left(WaiterEvent):
    """A waiter left the queue without a grant (timed out, went away, left its ticket,
    refused by a resize; a wait-idle once done)."""


@dataclass(frozen=True)
class Deleted(Event):
    """The semaphore was deleted: the stream's last event. ``missed``: the stream was down
    when it happened (on reconnecting the name answered 404)."""

    missed: bool = False


@dataclass(frozen=True)
class Reset(Event):
    """semad no longer had the events missed while the stream was down: read the state
    again. Its id is the point to resume from next time."""

    reason: str


_LEASE_EVENTS = {"granted": Granted, "released": Released, "expired": Expired,
                 "revoked": Revoked}
_WAITER_EVENTS = {"queued": Queued, "left": Left}


@dataclass(frozen=True)
class RawEvent:
    """One event as the stream carried it."""

    id: Optional[str]
    event: str
    data: str


class SSEParser:
    """Server-Sent Events, a line at a time (WHATWG rules for fields and multi-line data).
    ``feed`` returns the event a blank line completes, else None."""

    def __init__(self) -> None:
        self.last_id: Optional[str] = None
        self._event = ""
        self._data: List[str] = []

    def feed(self, raw: bytes) -> Optional[RawEvent]:
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if line.endswith("\r"):
            line = line[:-1]
        if line == "":
            ev = None
            if self._data:
                ev = RawEvent(self.last_id, self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return ev
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "id" and "\0" not in value:
            self.last_id = value
        elif name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


def parse_event(raw: RawEvent) -> Event:
    """The typed event of one raw semaphore event (an unknown type is a plain Event)."""
    try:
        doc = json.loads(raw.data)
    except ValueError:
        doc = {"raw": raw.data}
    data: Dict[str, Any] = doc if isinstance(doc, dict) else {"raw": doc}
    name = str(data.get("name", ""))
    kind = _LEASE_EVENTS.get(raw.event)
    try:
        if kind is not None:
            return kind(raw.event, raw.id, name, data, lease=str(data["lease"]),
                        weight=int(data["weight"]), fence=int(data["fence"]),
                        owner=data.get("owner"))
        waiter = _WAITER_EVENTS.get(raw.event)
        if waiter is not None:
            return waiter(raw.event, raw.id, name, data, weight=int(data["weight"]),
                          owner=data.get("owner"), since=int(data["since"]),
                          kind=data.get("kind"), waiting=int(data["waiting"]),
                          waiting_weight=int(data["waiting_weight"]))
        if raw.event == "resized":
            return Resized(raw.event, raw.id, name, data, capacity=int(data["capacity"]))
        if raw.event == "deleted":
            return Deleted(raw.event, raw.id, name, data, missed=bool(data.get("missed")))
        if raw.event == "reset":
            return Reset(raw.event, raw.id, name, data, reason=str(data.get("reason", "")))
    except (KeyError, TypeError, ValueError):
        pass
    return Event(raw.event, raw.id, name, data)
