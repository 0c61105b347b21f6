# SPDX-License-Identifier: MIT
"""_schedule.py - when each permit of a client is due for its renewal (or its deadline): one
heap for all of them, so that taking and releasing a permit costs a push and a counter,
not a timer or a thread each. Not thread-safe: the synchronous client holds a lock."""
from __future__ import annotations

import heapq
from typing import Any, List, Optional, Tuple

# An entry is stale once its permit's generation moved on (renewed, rescheduled, ended).
Entry = Tuple[float, int, Any, int]


class Schedule:
    def __init__(self) -> None:
        self._heap: List[Entry] = []
        self._seq = 0
        self._stale = 0  # entries of ended permits still in the heap

    def push(self, permit: Any, at: float, gen: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, permit, gen))

    def dropped(self) -> bool:
        """A permit ended with an entry in the heap. True when past half of the heap is
        stale: then ``compact()`` (released permits do not wait ttl/3 to leave it)."""
        self._stale += 1
        return self._stale > 64 and 2 * self._stale > len(self._heap)

    def compact(self) -> None:
        self._heap = [e for e in self._heap if e[2]._gen == e[3]]
        heapq.heapify(self._heap)
        self._stale = 0

    def next_at(self) -> Optional[float]:
        """When the first live entry is due (stale ones at the top are dropped)."""
        while self._heap:
            at, _, permit, gen = self._heap[0]
            if permit._gen == gen:
                return at
            heapq.heappop(self._heap)
            self._stale = max(0, self._stale - 1)
        return None

    def pop_due(self, now: float) -> Optional[Tuple[Any, int]]:
        """The first live entry due by ``now`` (permit, generation), taken out; or None."""
        at = self.next_at()
        if at is None or at > now:
            return None
        _, _, permit, gen = heapq.heappop(self._heap)
        return permit, gen

    def clear(self) -> None:
        self._heap = []
        self._stale = 0
