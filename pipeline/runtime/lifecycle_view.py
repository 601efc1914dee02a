"""The delivery consumer's read-only view of ``lifecycle``: which entries must be dropped.

Owns :class:`LifecycleIndex` over the whole ``lifecycle`` table (a global table, small): the
latest record per watcher and per erased subject, refreshed from the keys the table reports as
changed, and :meth:`~LifecycleIndex.dropping`, the record (if any) that drops a delivery —
a cancelled watcher, or an erased subject (DESIGN.md §10 "Cancel and erase reach every owner").
Grants are read through ``pipeline.runtime.views.GrantIndex``, shared with the evaluator.

Leaves out what dropping means (``pipeline.rules.dispatch.cancel``, purge by ``consumers.delivery.loop``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from pipeline.kafka.serde import SchemaRegistry
from pipeline.records.delivery_state import DeliveryRecord, LifecycleRecord, decode_lifecycle
from pipeline.rules.errors import SerdeError
from pipeline.runtime.tables import Table
from pipeline.runtime.views import observe

__all__ = ["LifecycleIndex"]

log = logging.getLogger(__name__)


class LifecycleIndex:
    """Lifecycle records by watcher and by subject, decoded once per change."""

    __slots__ = ("_by_key", "_data", "_registry", "_subjects", "_watchers", "undecodable")

    def __init__(self, table: Table, registry: SchemaRegistry) -> None:
        self._registry = registry
        self._data = observe(table)
        self._data.drain()
        self._by_key: dict[str, LifecycleRecord] = {}
        self._watchers: dict[tuple[str, str, str], LifecycleRecord] = {}
        self._subjects: dict[tuple[str, str], LifecycleRecord] = {}
        self.undecodable = 0
        for key in list(self._data):
            self._apply(key)

    def refresh(self) -> list[LifecycleRecord]:
        """Apply what changed since the last refresh; returns the records that now drop
        entries (for a sweep of what is already queued)."""
        dropping: list[LifecycleRecord] = []
        for key in self._data.drain():
            record = self._apply(key)
            if record is not None and record.drops_anything:
                dropping.append(record)
        return dropping

    def dropping(self, record: DeliveryRecord, created_at: datetime) -> LifecycleRecord | None:
        """The lifecycle record that drops this delivery, or None when it may go ahead."""
        erased = self._subjects.get((record.tenant_id, record.user_id))
        if erased is not None and erased.drops(record, created_at):
            return erased
        closed = self._watchers.get((record.tenant_id, record.user_id, record.watcher_id))
        if closed is not None and closed.drops(record, created_at):
            return closed
        return None

    def _apply(self, key: str) -> LifecycleRecord | None:
        old = self._by_key.pop(key, None)
        if old is not None:
            self._forget(old)
        raw = self._data.get(key)
        if raw is None:
            return None
        try:
            record = decode_lifecycle(self._registry, raw)
        except (SerdeError, KeyError, ValueError) as exc:
            self.undecodable += 1
            log.error("lifecycle record %s is unreadable: %s", key, exc)
            return None
        self._by_key[key] = record
        if record.watcher_id is None:
            self._subjects[(record.tenant_id, record.user_id)] = record
        else:
            self._watchers[(record.tenant_id, record.user_id, record.watcher_id)] = record
        return record

    def _forget(self, record: LifecycleRecord) -> None:
        if record.watcher_id is None:
            self._subjects.pop((record.tenant_id, record.user_id), None)
        else:
            self._watchers.pop((record.tenant_id, record.user_id, record.watcher_id), None)
