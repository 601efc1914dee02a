"""Real-broker helpers for the evaluator tests: a topology, watchers and grants as the command
processor writes them, events, and committed reads of receipts and the outbox.

Watchers and grants are written with the same serde and record shapes the command processor
uses (``schemas/watcher.v2.avsc``, :class:`pipeline.rules.commands.apply.GrantRecord`), keyed and
placed as DESIGN.md §2 says, so the evaluator cannot tell them apart from the processor's: a
watcher's data keys go to ``keys`` first (the subject's and the version's evidence key, wrapped
under the test KEK) and its definition is sealed, as are tick payloads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Producer

from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.clients import producer_config
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.grant import grant_value
from pipeline.records.outbox_entry import decode_outbox_entry
from pipeline.records.receipt import decode_receipt
from pipeline.records.tick import TickRecord, encode_tick
from pipeline.rules.authz import Action, Grant
from pipeline.rules.commands import GrantRecord
from pipeline.rules.data_keys import KeyOwner, evidence_owner, subject_owner
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.keys import canonical_json, watcher_key
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.receipts import Receipt
from pipeline.rules.ticker import TickKind
from pipeline.runtime.keys import read_keys
from tests.integration.runtime_helpers import read_all
from tests.keyring import sealed_definition
from tests.names import fresh

__all__ = [
    "Writer",
    "current_ring",
    "event_definition",
    "make_topology",
    "outbox_entries",
    "poll_definition",
    "receipts",
    "wait_for",
]

UNTIL = datetime(2030, 1, 1, tzinfo=UTC)


def make_topology(bootstrap: str, partitions: int, name: str = "ev") -> Topology:
    topology = Topology(fresh(f"t-{name}") + ".", partitions)
    ensure_topics(connect_admin(bootstrap), topology)
    return topology


def event_definition(
    tenant_id: str,
    user_id: str,
    watcher_id: str = "release-build-failed",
    source_id: str = "ci.pipeline",
    event_type: str = "build.finished",
    version: int = 1,
    max_age: str = "10m",
    **extra: Any,
) -> WatcherDefinition:
    body: dict[str, Any] = {
        "watcher_id": watcher_id,
        "purpose": "ops.alert",
        "source": {
            "kind": "event",
            "source_id": source_id,
            "event_type": event_type,
            "max_age": max_age,
        },
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "ops-hook", "verb": "notify"},
        "expires_at": "2030-01-01T00:00:00Z",
        "privacy": {"retain_paths": ["status"]},
        **extra,
    }
    definition = WatcherDefinition.from_json(body, tenant_id=tenant_id, user_id=user_id)
    return definition.with_version(version)


def poll_definition(
    tenant_id: str, user_id: str, watcher_id: str, source_id: str = "status.page"
) -> WatcherDefinition:
    body: dict[str, Any] = {
        "watcher_id": watcher_id,
        "purpose": "ops.alert",
        "source": {
            "kind": "polling",
            "source_id": source_id,
            "tool": "http.json@v1",
            "tool_ref": "status-page",
            "cron": "*/5 * * * *",
            "timezone": "UTC",
            "missed": "latest",
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "down"]},
        "delivery": {"target": "ops-hook", "verb": "notify"},
        "expires_at": "2030-01-01T00:00:00Z",
    }
    definition = WatcherDefinition.from_json(body, tenant_id=tenant_id, user_id=user_id)
    return definition.with_version(1)


class Writer:
    """Produces watchers, grants, events and ticks where their readers expect them."""

    def __init__(self, bootstrap: str, topology: Topology) -> None:
        self.topology = topology
        self.codec = default_codec()
        self.producer = Producer(producer_config(bootstrap))
        self.partitions = topology.partitions
        self.ring = KeyRing(KeyEncryptionKeys.load(), self.codec)

    def key(self, owner: KeyOwner) -> None:
        """``owner``'s data key in ``keys`` (made once, as the command processor does)."""
        if self.ring.record(owner) is not None:
            return
        topic_key, raw = self.ring.create(owner, datetime.now(UTC))
        self._send(Topic.KEYS, topic_key, raw, partition_for(owner.subject_key, self.partitions))

    def shred(self, owner: KeyOwner) -> None:
        """Tombstone ``owner``'s data key, as cancel or erasure does."""
        self.ring.apply(owner.topic_key, None)
        place = partition_for(owner.subject_key, self.partitions)
        self._send(Topic.KEYS, owner.topic_key, None, place)
        self.flush()

    def _send(
        self, topic: Topic, key: str, value: bytes | None, partition: int | None = None
    ) -> None:
        place = partition_for(key, self.partitions) if partition is None else partition
        self.producer.produce(self.topology.name(topic), value, key, place)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0

    def watcher(
        self,
        definition: WatcherDefinition,
        status: str = "active",
        revision: int = 1,
        activated_at: datetime | None = None,
    ) -> None:
        assert definition.version is not None
        tenant, user, watcher_id = definition.watcher_key
        self.key(subject_owner(tenant, user))
        self.key(evidence_owner(tenant, user, watcher_id, definition.version))
        source = definition.source
        record = {
            "tenant_id": definition.tenant_id,
            "user_id": definition.user_id,
            "watcher_id": definition.watcher_id,
            "version": definition.version,
            "revision": revision,
            "status": status,
            "source_kind": source.kind,
            "source_id": definition.source_id,
            "event_type": getattr(source, "event_type", None),
            "session_id": definition.session_id,
            "activated_at": activated_at,
            "updated_at": datetime.now(UTC),
            "definition": None,
            "sealed": sealed_definition(self.ring, definition),
        }
        key = watcher_key(*definition.watcher_key)
        value = self.codec.encode("watcher", record)
        self._send(Topic.WATCHERS, key, value, partition_for(definition.source_id, self.partitions))
        self.flush()

    def grant(
        self,
        tenant_id: str,
        user_id: str,
        sources: Iterable[str],
        grant_id: str,
        tools: Iterable[str] = (),
    ) -> None:
        grant = Grant(
            tools=frozenset(tools),
            grant_id=grant_id,
            tenant_id=tenant_id,
            user_id=user_id,
            purpose="ops.alert",
            sources=frozenset(sources),
            actions=frozenset({Action.EVALUATE, Action.DELIVER}),
            until=UNTIL,
        )
        record = grant_value(GrantRecord(grant, datetime.now(UTC), "test"))
        self._send(Topic.GRANTS, grant_id, self.codec.encode("grant", record))
        self.flush()

    def revoke(self, grant_id: str) -> None:
        self._send(Topic.GRANTS, grant_id, None)
        self.flush()

    def lifecycle_cancel(self, definition: WatcherDefinition) -> None:
        record = {
            "scope": "watcher",
            "tenant_id": definition.tenant_id,
            "user_id": definition.user_id,
            "watcher_id": definition.watcher_id,
            "version": definition.version,
            "revision": 9,
            "status": "cancelled",
            "reason": "cancelled",
            "at": datetime.now(UTC),
        }
        key = watcher_key(*definition.watcher_key)
        self._send(Topic.LIFECYCLE, key, self.codec.encode("lifecycle", record))
        self.flush()

    def event(
        self,
        source_id: str,
        event_type: str,
        event_id: str,
        payload: dict[str, Any],
        observed_at: datetime,
        *,
        envelope_id: str | None = None,
        cursor: str | None = None,
        partition: int | None = None,
        flush: bool = True,
    ) -> None:
        record = {
            "source_id": source_id,
            "event_type": event_type,
            "event_id": event_id,
            "envelope_id": envelope_id,
            "cursor": cursor,
            "observed_at": observed_at,
            "payload": canonical_json(payload).decode(),
        }
        value = self.codec.encode("event", record)
        while True:
            try:
                self._send(Topic.EVENTS, source_id, value, partition)
                break
            except BufferError:
                self.producer.poll(0.1)
        if flush:
            self.flush()

    def tick(self, definition: WatcherDefinition, scheduled_at: datetime, payload: Any) -> None:
        """A poll tick; a payload that is not a JSON object is written as the raw record a
        broken ticker would write (it seals only objects)."""
        assert definition.version is not None
        tenant, user, watcher_id = definition.watcher_key
        self.key(evidence_owner(tenant, user, watcher_id, definition.version))
        if isinstance(payload, dict):
            tick = TickRecord(
                TickKind.POLL,
                tenant,
                user,
                watcher_id,
                definition.version,
                definition.source_id,
                scheduled_at,
                scheduled_at,
                payload=payload,
            )
            value = encode_tick(self.codec, self.ring, tick)
        else:
            record = {
                "kind": "poll",
                "tenant_id": tenant,
                "user_id": user,
                "watcher_id": watcher_id,
                "watcher_version": definition.version,
                "source_id": definition.source_id,
                "scheduled_at": scheduled_at,
                "observed_at": scheduled_at,
                "payload": canonical_json(payload).decode(),
            }
            value = self.codec.encode("tick", record)
        self._send(Topic.TICKS, definition.source_id, value)
        self.flush()


def current_ring(bootstrap: str, topology: Topology) -> KeyRing:
    """The data keys ``keys`` holds now, under the test KEK."""
    ring = KeyRing(KeyEncryptionKeys.load(), default_codec())
    read_keys(bootstrap, topology, ring)
    return ring


def receipts(bootstrap: str, topology: Topology) -> list[tuple[Receipt, int]]:
    """Every committed receipt with the partition it landed on (opened with the keys now)."""
    codec = default_codec()
    ring = current_ring(bootstrap, topology)
    found = []
    for msg in read_all(bootstrap, topology.name(Topic.RECEIPTS), max_s=30):
        receipt, _source = decode_receipt(codec, ring, msg.value() or b"")
        found.append((receipt, msg.partition() or 0))
    return found


def outbox_entries(bootstrap: str, topology: Topology) -> list[OutboxEntry]:
    """Every committed outbox record (read_committed), in log order per partition."""
    codec = default_codec()
    ring = current_ring(bootstrap, topology)
    return [
        decode_outbox_entry(codec, ring, msg.value() or b"")
        for msg in read_all(bootstrap, topology.name(Topic.OUTBOX), max_s=30)
        if msg.value() is not None
    ]


def wait_for(check: Callable[[], bool], seconds: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def ago(now: datetime, **delta: float) -> datetime:
    return now - timedelta(**delta)
