"""The shared views over the runtime's tables: who watches what, who granted what, what was
cancelled or erased, and which data keys exist. Several stages read them (the evaluator and
ticker the watchers, everyone the grants and keys, delivery the lifecycle), so they live here,
once.

Owns :class:`WatcherIndex` (one per task partition of ``watchers``: watcher keys by
``(source_id, event_type)``, definitions decoded lazily and once per version, so an event costs
what its matching watchers cost and 100,000 watchers of other sources cost nothing),
:class:`GrantIndex` (the global ``grants`` table by subject) and :class:`LifecycleIndex` (the
global ``lifecycle`` table: the latest record per watcher and per erased subject, and which
delivery it drops) and :class:`KeyView` (the global ``keys`` table feeding a
:class:`~pipeline.crypto.ring.KeyRing`: a tombstone shreds the key in this process at the next
refresh). Each follows its table's changes through :class:`ObservedDict`, which the
runtime's table writes through, so a refresh touches only the keys that changed since the last
batch.

Leaves out deciding (``pipeline.rules``), the tables and transactions themselves
(``pipeline.runtime.app``) and the record layouts (``pipeline.records``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from pipeline.crypto.ring import KeyRing
from pipeline.records.codec import Codec
from pipeline.records.delivery_state import DeliveryRecord
from pipeline.records.grant import decode_grant
from pipeline.records.lifecycle import LifecycleRecord, decode_lifecycle
from pipeline.records.sealing import Sealer
from pipeline.records.watcher import Watch, decode_watch
from pipeline.rules.authz import Grant
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.runtime.tables import Table

__all__ = [
    "GrantIndex",
    "KeyView",
    "LifecycleIndex",
    "ObservedDict",
    "WatcherIndex",
    "observe",
]

log = logging.getLogger(__name__)


class ObservedDict(dict[str, bytes]):
    """A dict that remembers which keys were written or removed since :meth:`drain`."""

    __slots__ = ("changed",)

    def __init__(self, data: dict[str, bytes]) -> None:
        super().__init__(data)
        self.changed: set[str] = set()

    def __setitem__(self, key: str, value: bytes) -> None:
        super().__setitem__(key, value)
        self.changed.add(key)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.changed.add(key)

    def pop(self, key: str, *default: Any) -> Any:
        self.changed.add(key)
        return super().pop(key, *default)

    def drain(self) -> set[str]:
        changed, self.changed = self.changed, set()
        return changed


def observe(table: Table) -> ObservedDict:
    """Make ``table`` report its changes (idempotent); returns its observed data."""
    if not isinstance(table.data, ObservedDict):
        table.data = ObservedDict(table.data)
    return table.data


class WatcherIndex:
    """One partition of ``watchers``: by key, and event watchers by (source_id, event_type)."""

    __slots__ = (
        "_by_key",
        "_by_type",
        "_codec",
        "_data",
        "_matching",
        "_sealer",
        "table",
        "undecodable",
    )

    def __init__(self, table: Table, codec: Codec, sealer: Sealer) -> None:
        self.table = table
        self._codec = codec
        self._sealer = sealer
        self._data = observe(table)
        self._data.drain()
        self._by_key: dict[str, Watch] = {}
        self._by_type: dict[tuple[str, str], dict[str, Watch]] = {}
        # What ``for_event`` answered per (source_id, event_type), until that bucket changes.
        self._matching: dict[tuple[str, str], tuple[Watch, ...]] = {}
        self.undecodable = 0
        for key in list(self._data):
            self._apply(key)

    def refresh(self) -> int:
        """Apply what changed in the table since the last refresh; returns how many keys."""
        changed = self._data.drain()
        for key in changed:
            self._apply(key)
        return len(changed)

    def _apply(self, key: str) -> None:
        old = self._by_key.pop(key, None)
        if old is not None and old.event_type is not None:
            self._matching.pop((old.source_id, old.event_type), None)
            bucket = self._by_type.get((old.source_id, old.event_type))
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self._by_type[(old.source_id, old.event_type)]
        raw = self._data.get(key)
        if raw is None:
            return
        try:
            watch = decode_watch(self._codec, self._sealer, key, raw)
        except (SerdeError, ValueError, KeyError) as exc:
            self.undecodable += 1
            log.error("watchers record %s is unreadable: %s", key, exc)
            return
        self._by_key[key] = watch
        if watch.event_type is not None:
            self._matching.pop((watch.source_id, watch.event_type), None)
            self._by_type.setdefault((watch.source_id, watch.event_type), {})[key] = watch

    def for_event(self, source_id: str, event_type: str) -> Iterable[Watch]:
        """Event watchers of exactly this source and type (closed ones included)."""
        routed = (source_id, event_type)
        found = self._matching.get(routed)
        if found is None:
            bucket = self._by_type.get(routed)
            if bucket is None:
                return ()  # not remembered: event types are input, the memo stays bounded
            found = self._matching[routed] = tuple(bucket.values())
        return found

    def get(self, key: str) -> Watch | None:
        return self._by_key.get(key)

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Watch]:
        return iter(self._by_key.values())


class GrantIndex:
    """The whole ``grants`` table, by subject: authorization looks at one subject's grants."""

    __slots__ = ("_by_key", "_by_subject", "_codec", "_data", "_of", "undecodable")

    def __init__(self, table: Table, codec: Codec) -> None:
        self._codec = codec
        self._data = observe(table)
        self._data.drain()
        self._by_key: dict[str, Grant] = {}
        self._by_subject: dict[tuple[str, str], dict[str, Grant]] = {}
        self._of: dict[tuple[str, str], tuple[Grant, ...]] = {}  # what ``of`` answered
        self.undecodable = 0
        for key in list(self._data):
            self._apply(key)

    def refresh(self) -> int:
        changed = self._data.drain()
        for key in changed:
            self._apply(key)
        return len(changed)

    def _apply(self, key: str) -> None:
        old = self._by_key.pop(key, None)
        if old is not None:
            bucket = self._by_subject.get((old.tenant_id, old.user_id), {})
            bucket.pop(key, None)
            self._of.pop((old.tenant_id, old.user_id), None)
        raw = self._data.get(key)
        if raw is None:
            return
        try:
            grant = decode_grant(self._codec, raw).grant
        except (SerdeError, ValueError, KeyError, DefinitionError) as exc:
            self.undecodable += 1
            log.error("grants record %s is unreadable (fail-closed: ignored): %s", key, exc)
            return
        self._by_key[key] = grant
        self._by_subject.setdefault((grant.tenant_id, grant.user_id), {})[key] = grant
        self._of.pop((grant.tenant_id, grant.user_id), None)

    def of(self, tenant_id: str, user_id: str) -> tuple[Grant, ...]:
        """The grants of one subject (authorization never needs another's): the very same
        tuple until one of them changes, so a caller may remember what it decided from it."""
        subject = (tenant_id, user_id)
        found = self._of.get(subject)
        if found is None:
            bucket = self._by_subject.get(subject)
            found = self._of[subject] = () if not bucket else tuple(bucket.values())
        return found


class LifecycleIndex:
    """Lifecycle records by watcher and by subject, decoded once per change."""

    __slots__ = ("_by_key", "_codec", "_data", "_subjects", "_watchers", "undecodable")

    def __init__(self, table: Table, codec: Codec) -> None:
        self._codec = codec
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
            record = decode_lifecycle(self._codec, raw)
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


class KeyView:
    """The global ``keys`` table through a :class:`KeyRing`: records in, tombstones out."""

    __slots__ = ("_data", "ring", "table")

    def __init__(self, table: Table, ring: KeyRing) -> None:
        self.table = table
        self.ring = ring
        self._data = observe(table)
        self._data.drain()
        for key, raw in list(self._data.items()):
            ring.apply(key, raw)

    def refresh(self) -> int:
        """Apply what changed since the last refresh; returns how many keys."""
        changed = self._data.drain()
        for key in changed:
            self.ring.apply(key, self._data.get(key))
        return len(changed)
