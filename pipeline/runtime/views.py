"""The shared views over the runtime's tables: watchers, grants, lifecycle and data keys.

Owns :class:`TableView` (a table followed through :class:`ObservedDict`: each changed key
decoded once, with one exception policy, handed to ``put``/``dropped``, undecodable ones
counted), :class:`WatcherIndex`, :class:`GrantIndex`, :class:`LifecycleIndex`, :class:`KeyView`
and :class:`DecodedCache`. Leaves out deciding (``pipeline.rules``) and the tables themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, Generic, TypeVar

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
    "UNREADABLE",
    "DecodedCache",
    "GrantIndex",
    "KeyView",
    "LifecycleIndex",
    "ObservedDict",
    "TableView",
    "WatcherIndex",
    "observe",
]

log = logging.getLogger(__name__)

V = TypeVar("V")

UNREADABLE = (SerdeError, DefinitionError, ValueError, KeyError)
"""What a table record's decoder may raise for bytes it cannot read: the record is logged,
counted and left out (fail-closed), never an exception that stops the process."""


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


class TableView(Generic[V]):
    """A table followed through :class:`ObservedDict`: each changed key decoded once (one
    exception policy, :data:`UNREADABLE`), kept in ``by_key``, and handed to :meth:`put` or
    :meth:`dropped`, the hooks a view keeps its own indexes with.

    ``dropped(key, old)`` runs for every key deleted or no longer readable, whether or not it
    was held (``old`` None); ``put(key, value, old)`` for every key decoded, ``old`` what it
    replaces. A subclass calls :meth:`load` once its own fields exist.
    """

    __slots__ = ("_data", "_decode", "_what", "by_key", "table", "undecodable")

    def __init__(self, table: Table, decode: Callable[[str, bytes], V], what: str) -> None:
        self.table = table
        self._decode = decode
        self._what = what
        self._data = observe(table)
        self._data.drain()
        self.by_key: dict[str, V] = {}
        self.undecodable = 0

    def load(self) -> None:
        """Take in what the table holds now."""
        for key in list(self._data):
            self._apply(key)

    def refresh(self) -> int:
        """Apply what changed in the table since the last refresh; returns how many keys."""
        return len(self.changes())

    def changes(self) -> set[str]:
        """Apply what changed in the table since the last refresh; returns the keys."""
        changed = self._data.drain()
        for key in changed:
            self._apply(key)
        return changed

    def put(self, key: str, value: V, old: V | None) -> None:
        """``key`` now holds ``value`` (instead of ``old``)."""

    def dropped(self, key: str, old: V | None) -> None:
        """``key`` was deleted or is no longer readable (it held ``old``)."""

    def _apply(self, key: str) -> None:
        old = self.by_key.pop(key, None)
        raw = self._data.get(key)
        if raw is None:
            self.dropped(key, old)
            return
        try:
            value = self._decode(key, raw)
        except UNREADABLE as exc:
            self.undecodable += 1
            log.error("%s record %s is unreadable (left out): %s", self._what, key, exc)
            self.dropped(key, old)
            return
        self.by_key[key] = value
        self.put(key, value, old)


class DecodedCache(Generic[V]):
    """Values decoded from table bytes, by key, each held with the very bytes object it was
    decoded from: a key is decoded again only once its table holds another object (written,
    restored or rolled back since), so a rollback is never served a stale value."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[str, tuple[bytes, V]] = {}

    def get(self, key: str, raw: bytes, decode: Callable[[bytes], V]) -> V:
        """The value of ``raw`` (decoded now unless ``raw`` is what ``key`` last held)."""
        held = self._held.get(key)
        if held is not None and held[0] is raw:
            return held[1]
        value = decode(raw)
        self._held[key] = (raw, value)
        return value

    def put(self, key: str, raw: bytes, value: V) -> None:
        """Remember that ``raw`` decodes to ``value`` (a value just encoded)."""
        self._held[key] = (raw, value)

    def pop(self, key: str) -> None:
        self._held.pop(key, None)

    def clear(self) -> None:
        self._held.clear()


class WatcherIndex(TableView[Watch]):
    """One partition of ``watchers``: by key, and event watchers by (source_id, event_type)."""

    __slots__ = ("_by_type", "_matching")

    def __init__(self, table: Table, codec: Codec, sealer: Sealer) -> None:
        super().__init__(table, lambda key, raw: decode_watch(codec, sealer, key, raw), "watchers")
        self._by_type: dict[tuple[str, str], dict[str, Watch]] = {}
        # What ``for_event`` answered per (source_id, event_type), until that bucket changes.
        self._matching: dict[tuple[str, str], tuple[Watch, ...]] = {}
        self.load()

    def put(self, key: str, value: Watch, old: Watch | None) -> None:
        self.dropped(key, old)
        if value.event_type is not None:
            routed = (value.source_id, value.event_type)
            self._matching.pop(routed, None)
            self._by_type.setdefault(routed, {})[key] = value

    def dropped(self, key: str, old: Watch | None) -> None:
        if old is None or old.event_type is None:
            return
        routed = (old.source_id, old.event_type)
        self._matching.pop(routed, None)
        bucket = self._by_type.get(routed)
        if bucket is not None:
            bucket.pop(key, None)
            if not bucket:
                del self._by_type[routed]

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
        return self.by_key.get(key)

    def __len__(self) -> int:
        return len(self.by_key)

    def __iter__(self) -> Iterator[Watch]:
        return iter(self.by_key.values())


class GrantIndex(TableView[Grant]):
    """The whole ``grants`` table, by subject: authorization looks at one subject's grants."""

    __slots__ = ("_by_subject", "_of")

    def __init__(self, table: Table, codec: Codec) -> None:
        super().__init__(
            table, lambda key, raw: decode_grant(codec, raw).grant, "grants (fail-closed)"
        )
        self._by_subject: dict[tuple[str, str], dict[str, Grant]] = {}
        self._of: dict[tuple[str, str], tuple[Grant, ...]] = {}  # what ``of`` answered
        self.load()

    def put(self, key: str, value: Grant, old: Grant | None) -> None:
        self.dropped(key, old)
        subject = (value.tenant_id, value.user_id)
        self._by_subject.setdefault(subject, {})[key] = value
        self._of.pop(subject, None)

    def dropped(self, key: str, old: Grant | None) -> None:
        if old is not None:
            subject = (old.tenant_id, old.user_id)
            self._by_subject.get(subject, {}).pop(key, None)
            self._of.pop(subject, None)

    def of(self, tenant_id: str, user_id: str) -> tuple[Grant, ...]:
        """The grants of one subject (authorization never needs another's): the very same
        tuple until one of them changes, so a caller may remember what it decided from it."""
        subject = (tenant_id, user_id)
        found = self._of.get(subject)
        if found is None:
            bucket = self._by_subject.get(subject)
            found = self._of[subject] = () if not bucket else tuple(bucket.values())
        return found


class LifecycleIndex(TableView[LifecycleRecord]):
    """Lifecycle records by watcher and by subject, decoded once per change."""

    __slots__ = ("_subjects", "_watchers")

    def __init__(self, table: Table, codec: Codec) -> None:
        super().__init__(table, lambda key, raw: decode_lifecycle(codec, raw), "lifecycle")
        self._watchers: dict[tuple[str, str, str], LifecycleRecord] = {}
        self._subjects: dict[tuple[str, str], LifecycleRecord] = {}
        self.load()

    def dropping_records(self) -> list[LifecycleRecord]:
        """Apply what changed since the last refresh; returns the records that now drop
        entries (for a sweep of what is already queued)."""
        found = (self.by_key.get(key) for key in self.changes())
        return [record for record in found if record is not None and record.drops_anything]

    def dropping(self, record: DeliveryRecord, created_at: datetime) -> LifecycleRecord | None:
        """The lifecycle record that drops this delivery, or None when it may go ahead."""
        erased = self._subjects.get((record.tenant_id, record.user_id))
        if erased is not None and erased.drops(record, created_at):
            return erased
        closed = self._watchers.get((record.tenant_id, record.user_id, record.watcher_id))
        if closed is not None and closed.drops(record, created_at):
            return closed
        return None

    def put(self, key: str, value: LifecycleRecord, old: LifecycleRecord | None) -> None:
        self.dropped(key, old)
        if value.watcher_id is None:
            self._subjects[(value.tenant_id, value.user_id)] = value
        else:
            self._watchers[(value.tenant_id, value.user_id, value.watcher_id)] = value

    def dropped(self, key: str, old: LifecycleRecord | None) -> None:
        if old is None:
            return
        if old.watcher_id is None:
            self._subjects.pop((old.tenant_id, old.user_id), None)
        else:
            self._watchers.pop((old.tenant_id, old.user_id, old.watcher_id), None)


class KeyView(TableView[bytes]):
    """The global ``keys`` table through a :class:`KeyRing`: records in, tombstones out (the
    ring decodes each record itself)."""

    __slots__ = ("ring",)

    def __init__(self, table: Table, ring: KeyRing) -> None:
        super().__init__(table, lambda key, raw: raw, "keys")
        self.ring = ring
        self.load()

    def put(self, key: str, value: bytes, old: bytes | None) -> None:
        self.ring.apply(key, value)

    def dropped(self, key: str, old: bytes | None) -> None:
        self.ring.apply(key, None)  # held or not: a key the ring made and a rollback undid
