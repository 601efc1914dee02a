"""Cancel and erase reach the evaluator: which ``watcher-state`` keys to tombstone (DESIGN.md §10).

Owns :class:`LifecycleTracker`: cancelled versions and erased subjects from the global
``lifecycle`` table, and per task partition the keys still to check, each kept until its
tombstone committed (an abort never loses one; an old cancel never hits a re-created watcher).
Closing keeps the state. Leaves out writing the changelog and the outbox side (delivery's).
"""

from __future__ import annotations

import logging
from datetime import datetime

from pipeline.records.codec import Codec
from pipeline.records.lifecycle import LifecycleRecord, decode_lifecycle
from pipeline.rules.errors import SerdeError
from pipeline.rules.keys import subject_of
from pipeline.rules.lifecycle import cancel_drops, erasure_drops
from pipeline.runtime.tables import Table
from pipeline.runtime.views import TableView

__all__ = ["LifecycleTracker"]

log = logging.getLogger(__name__)


class LifecycleTracker(TableView[LifecycleRecord]):
    """Cancelled versions and erased subjects, and per partition the state keys to tombstone."""

    __slots__ = ("_cancelled", "_codec", "_erased", "_pending", "_tables")

    def __init__(self, table: Table, codec: Codec) -> None:
        super().__init__(table, lambda key, raw: decode_lifecycle(codec, raw), "lifecycle")
        self._codec = codec
        self._cancelled: dict[str, int] = {}  # watcher key → highest cancelled version
        self._erased: dict[str, datetime] = {}  # subject key → when it was erased
        self._pending: dict[int, set[str]] = {}
        self._tables: dict[int, Table] = {}
        self.load()

    def put(self, key: str, value: LifecycleRecord, old: LifecycleRecord | None) -> None:
        if value.erasure:
            self._erased[key] = value.at
        elif value.cancel:
            self._cancelled[key] = max(self._cancelled.get(key, 0), value.version)

    def refresh(self) -> int:
        """Take in lifecycle changes since the last batch and queue their keys everywhere."""
        changed = self.changes()
        for key in changed:
            if key in self._cancelled:
                for pending in self._pending.values():
                    pending.add(key)
            elif key in self._erased:
                prefix = key[:-1] + ","
                for partition, pending in self._pending.items():
                    table = self._tables[partition]
                    pending.update(k for k in table.data if k.startswith(prefix))
        return len(changed)

    def apply(self, partition: int, state: Table) -> int:
        """Tombstone the doomed state keys of ``partition``; returns how many were deleted."""
        if self._tables.get(partition) is not state:
            self._tables[partition] = state  # newly assigned or restored: check every key
            self._pending[partition] = set(state.data)
        pending = self._pending[partition]
        if not pending:
            return 0
        deleted = 0
        for key in list(pending):
            if key in state.data:
                if self._doomed(key, state.data[key]):
                    state.delete(key)
                    deleted += 1
                else:
                    pending.discard(key)
            elif key not in state.undo:
                pending.discard(key)  # its tombstone is committed (or it never existed)
        return deleted

    def _doomed(self, key: str, raw: bytes) -> bool:
        cancelled = self._cancelled.get(key)
        erased = self._erased.get(subject_of(key))
        if cancelled is None and erased is None:
            return False
        try:
            _, value = self._codec.decode(raw)
        except SerdeError:
            return True  # unreadable state of a cancelled or erased watcher: drop it
        if cancelled is not None and cancel_drops(cancelled, int(value["version"])):
            return True
        return erased is not None and erasure_drops(erased, value["updated_at"])
