"""The due-time queue that drives retries, deferrals and purges between outbox records.

Owns :class:`DueQueue`: at most one timer per delivery key — a :class:`Due` of ``attempt``
(a ``pending`` entry) or ``purge`` (a settled one whose retention has run out) — in a heap
with lazy invalidation, so rescheduling a key is O(log n) and never searches the heap. It is
rebuilt from ``delivery-state`` whenever a partition is restored (DESIGN.md §4).

Leaves out what a timer does when it fires (``consumers.delivery.loop``) and the clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

__all__ = ["Due", "DueKind", "DueQueue"]


class DueKind(StrEnum):
    ATTEMPT = "attempt"
    PURGE = "purge"


@dataclass(frozen=True, slots=True)
class Due:
    key: str
    partition: int
    kind: DueKind
    at: datetime


class DueQueue:
    """Timers by delivery key; the earliest first."""

    __slots__ = ("_current", "_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[datetime, int, Due]] = []
        self._current: dict[str, Due] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._current)

    def __contains__(self, key: str) -> bool:
        return key in self._current

    def get(self, key: str) -> Due | None:
        return self._current.get(key)

    def schedule(self, key: str, partition: int, kind: DueKind, at: datetime) -> None:
        """Set ``key``'s one timer, replacing any earlier one."""
        due = Due(key, partition, kind, at)
        self._current[key] = due
        heapq.heappush(self._heap, (at, next(self._seq), due))

    def cancel(self, key: str) -> None:
        self._current.pop(key, None)

    def drop_partitions(self, partitions: set[int]) -> None:
        """Forget every timer of ``partitions`` (revoked, or about to be rebuilt)."""
        for key in [k for k, d in self._current.items() if d.partition in partitions]:
            del self._current[key]
        self._compact()

    def next_at(self) -> datetime | None:
        """When the earliest live timer fires."""
        self._skip_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: datetime, limit: int) -> Iterator[Due]:
        """Remove and yield up to ``limit`` timers due at ``now``, earliest first."""
        taken = 0
        while taken < limit:
            self._skip_stale()
            if not self._heap or self._heap[0][0] > now:
                return
            _, _, due = heapq.heappop(self._heap)
            del self._current[due.key]
            taken += 1
            yield due

    def _skip_stale(self) -> None:
        heap = self._heap
        while heap and self._current.get(heap[0][2].key) is not heap[0][2]:
            heapq.heappop(heap)

    def _compact(self) -> None:
        """Rebuild the heap from live timers once stale ones dominate it."""
        if len(self._heap) > 2 * len(self._current) + 64:
            self._heap = [(d.at, next(self._seq), d) for d in self._current.values()]
            heapq.heapify(self._heap)
