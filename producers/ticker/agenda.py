"""When each watcher next needs a look: the poll ticker's agenda.

Owns :class:`Agenda`, a min-heap of (time, key) with lazy invalidation, so a step pops only the
watchers whose ``next_check`` (from :func:`pipeline.rules.ticker.plan_watcher`) has come, each once,
however often it was rescheduled. Pure: times are given, never read. Left out: what a look
decides (``pipeline.rules.ticker``) and who holds the watchers (``producers.ticker.views``).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from datetime import datetime
from typing import Final, Generic, TypeVar

from pipeline.rules.instants import to_epoch_micros

__all__ = ["Agenda"]

_MICROS_MEMO: Final = 65_536


_K = TypeVar("_K", bound=Hashable)


class Agenda(Generic[_K]):
    """When each key next needs a look: a heap with lazy invalidation.

    :meth:`due` pops every key whose time has come, each once, however often it was set.
    """

    __slots__ = ("_heap", "_micros", "_when")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, _K]] = []
        self._when: dict[_K, int] = {}
        self._micros: dict[datetime, int] = {}  # many keys share a next check

    def set(self, key: _K, when: datetime | None) -> None:
        """Look at ``key`` at ``when`` (``None``: never, until set again)."""
        if when is None:
            self._when.pop(key, None)
            return
        micros = self._micros.get(when)
        if micros is None:
            if len(self._micros) > _MICROS_MEMO:
                self._micros.clear()
            micros = self._micros[when] = to_epoch_micros(when)
        if self._when.get(key) == micros:
            return
        self._when[key] = micros
        heapq.heappush(self._heap, (micros, id(key), key))

    def discard(self, key: _K) -> None:
        self._when.pop(key, None)

    def due(self, now: datetime) -> list[_K]:
        """Keys due at or before ``now``; they are no longer scheduled until set again."""
        limit = to_epoch_micros(now)
        heap, when = self._heap, self._when
        out: list[_K] = []
        while heap and heap[0][0] <= limit:
            micros, _, key = heapq.heappop(heap)
            if when.get(key) == micros:
                del when[key]
                out.append(key)
        return out

    def next_at(self) -> int | None:
        """The earliest scheduled time (epoch micros), if any."""
        while self._heap and self._when.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._when)
