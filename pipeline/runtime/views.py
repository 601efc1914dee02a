"""The evaluator's in-memory views over its tables: who watches what, and who granted what.

Owns :class:`WatcherIndex` (one per task partition of ``watchers``: watcher keys by
``(source_id, event_type)``, definitions decoded lazily and once per version, so an event costs
what its matching watchers cost and 100,000 watchers of other sources cost nothing) and
:class:`GrantIndex` (the global ``grants`` table by subject). Both follow their table's changes
through :class:`ObservedDict`, which the runtime's table writes through, so a refresh touches
only the keys that changed since the last batch.

Leaves out deciding (``pipeline.rules.evaluation``), the runtime's tables and transactions
(``pipeline.kafka``), and the record layouts (``schemas/watcher.v1.avsc``, ``grant.v1.avsc``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pipeline.kafka.serde import SchemaRegistry
from pipeline.rules.authz import AuthzDecision, Grant
from pipeline.rules.budgets import BudgetCaps, BudgetScope
from pipeline.rules.commands.apply import GrantRecord
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.lifecycle import WatcherStatus, is_closed
from pipeline.runtime.tables import Table

__all__ = ["GrantIndex", "ObservedDict", "Watch", "WatcherIndex", "observe"]

log = logging.getLogger(__name__)

WATCHER = "watcher"
GRANT = "grant"


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


@dataclass(slots=True)
class Watch:
    """One watcher as the evaluator holds it: routing fields now, the definition on first use."""

    key: str
    parts: tuple[str, str, str]
    source_id: str
    event_type: str | None
    version: int
    revision: int
    status: WatcherStatus
    activated_at: datetime | None
    definition_json: str | None
    _definition: WatcherDefinition | None = None
    # The evaluator's budget scope and effective caps, worked out on first charge, tagged with
    # the operator defaults they were filled from.
    budget: tuple[BudgetCaps, BudgetScope, BudgetCaps] | None = None
    # The last allow, with the exact grants tuple it was decided from and the grant that gave
    # it: it holds while that tuple is current and the grant has not ended (allows only ever
    # end with time), so it is reused rather than decided again per input.
    allowed: tuple[tuple[Grant, ...], Grant, AuthzDecision] | None = None

    @property
    def definition(self) -> WatcherDefinition:
        """The compiled definition of this version, decoded once (raises ``DefinitionError``)."""
        if self._definition is None:
            assert self.definition_json is not None
            parsed = WatcherDefinition.model_validate_json(self.definition_json)
            if parsed.version != self.version:
                parsed = parsed.with_version(self.version)
            self._definition = parsed
            self.definition_json = None  # the model holds it now
        return self._definition

    @property
    def closed(self) -> bool:
        return is_closed(self.status)


def decode_watch(registry: SchemaRegistry, key: str, data: bytes) -> Watch:
    record_type, value = registry.decode(data)
    if record_type != WATCHER:
        raise SerdeError(f"expected a watcher record, got {record_type}")
    return Watch(
        key=key,
        parts=(value["tenant_id"], value["user_id"], value["watcher_id"]),
        source_id=value["source_id"],
        event_type=value["event_type"] if value["source_kind"] == "event" else None,
        version=value["version"],
        revision=value["revision"],
        status=WatcherStatus(value["status"]),
        activated_at=value["activated_at"],
        definition_json=value["definition"],
    )


class WatcherIndex:
    """One partition of ``watchers``: by key, and event watchers by (source_id, event_type)."""

    __slots__ = ("_by_key", "_by_type", "_data", "_registry", "table", "undecodable")

    def __init__(self, table: Table, registry: SchemaRegistry) -> None:
        self.table = table
        self._registry = registry
        self._data = observe(table)
        self._data.drain()
        self._by_key: dict[str, Watch] = {}
        self._by_type: dict[tuple[str, str], dict[str, Watch]] = {}
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
            bucket = self._by_type.get((old.source_id, old.event_type))
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self._by_type[(old.source_id, old.event_type)]
        raw = self._data.get(key)
        if raw is None:
            return
        try:
            watch = decode_watch(self._registry, key, raw)
        except (SerdeError, ValueError, KeyError) as exc:
            self.undecodable += 1
            log.error("watchers record %s is unreadable: %s", key, exc)
            return
        self._by_key[key] = watch
        if watch.event_type is not None:
            self._by_type.setdefault((watch.source_id, watch.event_type), {})[key] = watch

    def for_event(self, source_id: str, event_type: str) -> Iterable[Watch]:
        """Event watchers of exactly this source and type (closed ones included)."""
        bucket = self._by_type.get((source_id, event_type))
        return () if bucket is None else tuple(bucket.values())

    def get(self, key: str) -> Watch | None:
        return self._by_key.get(key)

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Watch]:
        return iter(self._by_key.values())


def decode_grant(registry: SchemaRegistry, data: bytes) -> Grant:
    record_type, value = registry.decode(data)
    if record_type != GRANT:
        raise SerdeError(f"expected a grant record, got {record_type}")
    return GrantRecord.from_record(value).grant


class GrantIndex:
    """The whole ``grants`` table, by subject: authorization looks at one subject's grants."""

    __slots__ = ("_by_key", "_by_subject", "_data", "_of", "_registry", "undecodable")

    def __init__(self, table: Table, registry: SchemaRegistry) -> None:
        self._registry = registry
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
            grant = decode_grant(self._registry, raw)
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
