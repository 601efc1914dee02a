"""The HTTP API's reads of the log: receipts, lifecycle records, the in-app ledger, deliveries.

Owns :class:`LedgerStore` (bounded reads and folds of ``receipts``, ``lifecycle`` and the ledger
index), the acknowledgement record (kind ``ack`` on ``notifications``, keyed and erased like its
notification) and the readiness probe (cached :data:`READY_CACHE_S`). Records whose key is shredded
or past ``retain_until`` are left out, never shown. Left out: command round trips (``pool``), who
may read (the routes) and the record schemas."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterable, Iterator
from datetime import datetime
from typing import Any, Final

from prometheus_client import REGISTRY, CollectorRegistry

from pipeline.clock import Clock
from pipeline.control.deliveries import delivery_state_filter, delivery_view, matching
from pipeline.control.http.index import DEFAULT_MAX_RECORDS, DEFAULT_PER_SUBJECT, LedgerIndex
from pipeline.control.http.metrics import api_metrics
from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.clients import Producer
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.scan import scan
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.lifecycle import decode_lifecycle
from pipeline.records.notification import (
    NotificationKind,
    decode_notification,
    encode_notification,
)
from pipeline.records.receipt import decode_receipt
from pipeline.rules.errors import BrokerError, SerdeError
from pipeline.rules.instants import rfc3339_micros, utc
from pipeline.rules.keys import subject_key, watcher_key
from pipeline.rules.receipts import Receipt
from pipeline.rules.retention import retained
from pipeline.runtime.keys import FollowedKeys
from pipeline.runtime.processing import Message

__all__ = ["DEFAULT_MAX_SCAN", "READY_CACHE_S", "LedgerStore"]

_READ_TIMEOUT_S: Final = 15.0
_READY_TIMEOUT_S: Final = 3.0
READY_CACHE_S: Final = 2.0
DEFAULT_MAX_SCAN: Final = 10_000


class LedgerStore:
    """Reads receipts and the ledger, writes acknowledgements. No network until first use.

    A partition read takes its newest ``max_scan`` records only (counted in
    ``vigil_api_log_scans_total``): a watcher's receipts newest first, each watcher's newest
    receipt, a watcher's lifecycle records. The ledger comes from the index (``index``), deduped on
    delivery key, ``wake`` records skipped, acknowledgements applied. Sealed fields open with the
    subject's keys read on afresh for every request (:class:`~pipeline.runtime.keys.FollowedKeys`),
    so a shredded key's records stop showing at once and are counted as ``erased`` (DESIGN §10)."""

    def __init__(
        self,
        bootstrap: str,
        topology: Topology,
        clock: Clock,
        *,
        codec: AvroCodec | None = None,
        max_scan: int = DEFAULT_MAX_SCAN,
        keks: KeyEncryptionKeys | None = None,
        per_subject: int = DEFAULT_PER_SUBJECT,
        max_records: int = DEFAULT_MAX_RECORDS,
        metrics: CollectorRegistry = REGISTRY,
    ) -> None:
        self._scans = api_metrics(metrics).scans
        self._bootstrap = bootstrap
        self._topology = topology
        self._clock = clock
        self._codec = codec or default_codec()
        self._keks = keks or KeyEncryptionKeys.load()
        self._producer = Producer(bootstrap)
        self._max_scan = max_scan
        self._ready: tuple[float, str | None] | None = None
        self._ready_lock = threading.Lock()
        ring = KeyRing(self._keks, self._codec, cache_size=4096)
        self._keys = FollowedKeys(bootstrap, topology, ring)
        self._index = LedgerIndex(
            bootstrap,
            topology,
            self._codec,
            per_subject=per_subject,
            max_records=max_records,
        )

    # -- receipts ---------------------------------------------------------------------------

    def evaluations(
        self, tenant_id: str, user_id: str, watcher_id: str, source_id: str, limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        """The watcher's readable receipts, newest first (its partition is its source's), and
        how many were left out as erased."""
        topic = self._topology.name(Topic.RECEIPTS)
        partition = partition_for(source_id, self._topology.partitions_for(Topic.RECEIPTS))
        wanted = watcher_key(tenant_id, user_id, watcher_id).encode("utf-8")
        ring = self._ring(tenant_id, user_id)
        now = self._clock.now()
        found: list[Receipt] = []
        erased = 0
        for msg in self._scan(topic, (partition,)):
            raw = msg.value()
            if msg.key() != wanted or raw is None:
                continue
            try:
                receipt, _ = decode_receipt(self._codec, ring, raw)
            except (SerdeError, ValueError):
                continue  # the dead-letter path's business, not the reader's
            if not retained(receipt.retain_until, now):
                continue
            if receipt.erased:
                erased += 1
                continue
            found.append(receipt)
        found.sort(key=lambda r: r.evaluated_at, reverse=True)
        return [_evaluation(r, source_id) for r in found[:limit]], erased

    def latest(
        self, tenant_id: str, user_id: str, source_ids: Iterable[str] | None = None
    ) -> dict[str, dict[str, Any]]:
        """The newest readable receipt of each of the subject's watchers on ``source_ids``'
        partitions of ``receipts`` (None: every partition; the newest ``max_scan`` records of
        each), by watcher id: one read per page, never one per row."""
        topic = self._topology.name(Topic.RECEIPTS)
        count = self._topology.partitions_for(Topic.RECEIPTS)
        if source_ids is None:
            partitions = list(range(count))
        else:
            partitions = sorted({partition_for(source, count) for source in source_ids})
        if not partitions:
            return {}
        mine = (subject_key(tenant_id, user_id)[:-1] + ",").encode("utf-8")  # ["t","u",…
        ring = self._ring(tenant_id, user_id)
        now = self._clock.now()
        newest: dict[str, Receipt] = {}
        for msg in self._scan(topic, partitions):
            raw, key = msg.value(), msg.key() or b""
            if raw is None or not key.startswith(mine):
                continue
            try:
                receipt, _ = decode_receipt(self._codec, ring, raw)
            except (SerdeError, ValueError):
                continue
            if (receipt.tenant_id, receipt.user_id) != (tenant_id, user_id):
                continue
            if receipt.erased or not retained(receipt.retain_until, now):
                continue
            seen = newest.get(receipt.watcher_id)
            if seen is None or receipt.evaluated_at >= seen.evaluated_at:
                newest[receipt.watcher_id] = receipt
        return {wid: _evaluation(r, "") for wid, r in newest.items()}

    def lifecycle(self, tenant_id: str, user_id: str, watcher_id: str) -> list[dict[str, Any]]:
        """The watcher's ``lifecycle`` records still in the log (the topic is compacted: the
        newest always, older ones until compaction), oldest first."""
        topic = self._topology.name(Topic.LIFECYCLE)
        key = watcher_key(tenant_id, user_id, watcher_id)
        partition = partition_for(key, self._topology.partitions_for(Topic.LIFECYCLE))
        wanted = key.encode("utf-8")
        found: list[dict[str, Any]] = []
        for msg in self._scan(topic, (partition,)):
            raw = msg.value()
            if msg.key() != wanted or raw is None:
                continue
            try:
                record = decode_lifecycle(self._codec, raw)
            except (SerdeError, ValueError, KeyError):
                continue
            if (record.tenant_id, record.user_id, record.watcher_id) != (
                tenant_id,
                user_id,
                watcher_id,
            ):
                continue
            found.append(
                {
                    "at": rfc3339_micros(record.at),
                    "status": record.status,
                    "version": record.version,
                    "revision": record.revision,
                    "reason": record.reason,
                }
            )
        return found

    # -- the ledger -------------------------------------------------------------------------

    def notifications(self, tenant_id: str, user_id: str) -> tuple[list[dict[str, Any]], int]:
        """The subject's notifications, newest first: one per delivery key, with ``acked_at``;
        and how many were left out as erased. Read from the index (the subject's newest
        records), never from a scan of its partition."""
        subject = subject_key(tenant_id, user_id)
        _, partition = self._ledger_partition(subject)
        raws = self._index.notifications(subject, partition, _READ_TIMEOUT_S)
        ring = self._ring(tenant_id, user_id)
        now = self._clock.now()
        notes: dict[str, dict[str, Any]] = {}
        acks: dict[str, str] = {}
        erased: set[str] = set()
        for raw in raws:
            try:
                value = decode_notification(self._codec, ring, raw)
            except (SerdeError, ValueError):
                continue
            dkey = value["delivery_key"]
            kind = value["kind"]
            if kind == NotificationKind.NOTIFICATION and dkey not in notes:
                if not retained(value.get("retain_until"), now):
                    continue
                if value["erased"]:
                    erased.add(dkey)
                    continue
                notes[dkey] = _notification(value)
            elif kind == NotificationKind.ACK and dkey not in acks:
                acks[dkey] = rfc3339_micros(value["created_at"])
        for dkey, note in notes.items():
            note["acked_at"] = acks.get(dkey)
        ordered = sorted(notes.values(), key=lambda n: n["created_at"], reverse=True)
        return ordered, len(erased - set(notes))

    def ack(self, tenant_id: str, user_id: str, delivery_key: str) -> dict[str, Any] | None:
        """Acknowledge one of the subject's notifications; None when it has no such one."""
        notes, _ = self.notifications(tenant_id, user_id)
        note = next((n for n in notes if n["delivery_key"] == delivery_key), None)
        if note is None:
            return None
        if note["acked_at"] is not None:
            return {"delivery_key": delivery_key, "acked_at": note["acked_at"], "already": True}
        now = utc(self._clock.now())
        value = encode_notification(
            self._codec,
            self._ring(tenant_id, user_id),
            NotificationKind.ACK,
            delivery_key=delivery_key,
            tenant_id=tenant_id,
            user_id=user_id,
            watcher_id=note["watcher_id"],
            session_id=note["session_id"],
            created_at=now,
        )
        subject = subject_key(tenant_id, user_id)
        topic, partition = self._ledger_partition(subject)
        self._produce(topic, partition, subject, value)
        return {"delivery_key": delivery_key, "acked_at": rfc3339_micros(now), "already": False}

    # -- deliveries ---------------------------------------------------------------------------

    def deliveries(
        self, tenant_id: str, user_id: str, state: str | None, watcher_id: str | None
    ) -> list[dict[str, Any]]:
        """The subject's deliveries (``state`` a status or ``dead``), newest first, from the
        index (the subject's newest delivery keys)."""
        records = self._index.deliveries(tenant_id, user_id, _READ_TIMEOUT_S)
        chosen = matching(records, delivery_state_filter(state), watcher_id)
        return [delivery_view(r) for r in chosen]

    def delivery(self, tenant_id: str, user_id: str, delivery_key: str) -> dict[str, Any] | None:
        """One of the subject's deliveries; None for a missing or another subject's key."""
        count = self._topology.partitions_for(Topic.DELIVERY_STATE)
        partition = partition_for(delivery_key, count)
        record = self._index.delivery(tenant_id, user_id, delivery_key, partition, _READ_TIMEOUT_S)
        return None if record is None else delivery_view(record)

    def _ring(self, tenant_id: str, user_id: str) -> KeyRing:
        """The data keys as ``keys`` holds them now (the subject's partition caught up)."""
        return self._keys.ring_for(tenant_id, user_id)

    # -- readiness --------------------------------------------------------------------------

    def ready(self) -> str | None:
        """None when the broker answers, the command topic exists and the ledger index has read
        the log once; else what is wrong. One metadata request per :data:`READY_CACHE_S` at
        most, however often it is probed."""
        with self._ready_lock:
            cached = self._ready
            if cached is not None and time.monotonic() - cached[0] < READY_CACHE_S:
                return cached[1]
            answer = self._probe() or self._index.ready()
            self._ready = (time.monotonic(), answer)
            return answer

    def _probe(self) -> str | None:
        topic = self._topology.name(Topic.COMMANDS)
        try:
            metadata = self._producer.metadata(_READY_TIMEOUT_S)
        except BrokerError as exc:
            return f"broker unreachable: {exc}"
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            return f"topic {topic} is missing: run `vigil topics create`"
        return None

    # -- internals --------------------------------------------------------------------------

    def _ledger_partition(self, subject: str) -> tuple[str, int]:
        topic = self._topology.name(Topic.NOTIFICATIONS)
        return topic, partition_for(subject, self._topology.partitions_for(Topic.NOTIFICATIONS))

    def _scan(self, topic: str, partitions: Collection[int]) -> Iterator[Message]:
        """The newest ``max_scan`` committed records of ``partitions``, counted as one read."""
        self._scans.labels(topic.removeprefix(self._topology.prefix)).inc()
        return scan(self._bootstrap, topic, partitions=partitions, tail=self._max_scan)

    def _produce(self, topic: str, partition: int, key: str, value: bytes) -> None:
        self._producer.produce(topic, key, value, partition)
        self._producer.flush(_READ_TIMEOUT_S, "acknowledgements")

    def close(self) -> None:
        self._index.close()
        self._producer.close(_READ_TIMEOUT_S)


def _instant(value: datetime | None) -> str | None:
    return None if value is None else rfc3339_micros(value)


def _evaluation(receipt: Receipt, source_id: str) -> dict[str, Any]:
    budget, tool_error = receipt.budget, receipt.tool_error
    return {
        "watcher_id": receipt.watcher_id,
        "watcher_version": receipt.watcher_version,
        "evaluated_at": rfc3339_micros(receipt.evaluated_at),
        "evidence_digest": receipt.evidence_digest,
        "trigger": dict(receipt.trigger),
        "trigger_key": receipt.trigger_key,
        "observed_at": rfc3339_micros(receipt.observed_at),
        "outcome": receipt.outcome.value,
        "reason": receipt.reason.value,
        "authorized": receipt.authorized,
        "authorization": receipt.authorization,
        "budget": None if budget is None else budget.value,
        "tool_error": None if tool_error is None else tool_error.value,
        "payload": receipt.payload,
        "delivery_key": receipt.delivery_key,
        "note": receipt.note,
        "source_id": source_id,
    }


def _notification(value: dict[str, Any]) -> dict[str, Any]:
    return {
        "delivery_key": value["delivery_key"],
        "watcher_id": value["watcher_id"],
        "session_id": value.get("session_id"),
        "outcome": value.get("outcome"),
        "verb": value.get("verb"),
        "text": value.get("text"),
        "trigger": value.get("trigger"),
        "evidence_digest": value.get("evidence_digest"),
        "due_at": _instant(value.get("due_at")),
        "late": bool(value.get("late")),
        "created_at": rfc3339_micros(value["created_at"]),
    }
