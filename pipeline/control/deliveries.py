"""Reading deliveries back: one subject's ``delivery-state`` records as the API, the CLI and the
console show them (DESIGN.md §9).

Owns :func:`read_deliveries` (newest per key, filtered, newest first), :func:`read_delivery` (one
key, its own partition only), :func:`matching` and :func:`delivery_view`; reads are bounded by
``max_scan`` per partition. Left out: who may read (callers authorize first), redelivering (a
command) and the entries' sealed content (never shown)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.scan import scan
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.delivery_state import DeliveryRecord, decode_record
from pipeline.rules.errors import SerdeError
from pipeline.rules.instants import rfc3339_micros
from pipeline.rules.outcomes import DeliveryStatus

__all__ = [
    "DEAD",
    "DEFAULT_MAX_SCAN",
    "delivery_state_filter",
    "delivery_view",
    "matching",
    "read_deliveries",
    "read_delivery",
]

DEAD: Final = "dead"
"""The filter name of dead letters (``state=dead``)."""
DEFAULT_MAX_SCAN: Final = 50_000


def delivery_state_filter(state: str | None) -> DeliveryStatus | None:
    """``state`` as a filter: a status value, or ``dead`` for ``dead_letter``; ValueError else."""
    if state is None or state == "":
        return None
    if state == DEAD:
        return DeliveryStatus.DEAD_LETTER
    return DeliveryStatus(state)


def _instant(value: datetime | None) -> str | None:
    return None if value is None else rfc3339_micros(value)


def delivery_view(record: DeliveryRecord) -> dict[str, Any]:
    """What a delivery is shown as (JSON): never a response body, only categorical codes."""
    state = record.state
    status = state.status
    return {
        "delivery_key": record.key,
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "watcher_id": record.watcher_id,
        "watcher_version": record.watcher_version,
        "target": record.target,
        "state": status.value,
        "attempts": state.attempt,
        "redeliveries": state.redeliveries,
        "next_attempt_at": _instant(state.due_at) if status is DeliveryStatus.PENDING else None,
        "reason": None if state.reason is None else state.reason.value,
        "detail": record.detail,
        "last_error": None if state.last_error is None else state.last_error.value,
        "created_at": _instant(state.created_at),
        "updated_at": _instant(state.updated_at),
        "delivered_at": _instant(state.delivered_at),
        "settled_at": _instant(state.settled_at),
        "redeliverable": status in (DeliveryStatus.DEAD_LETTER, DeliveryStatus.SUPPRESSED),
    }


def _fold(
    messages: Iterable[Any], codec: AvroCodec, tenant_id: str, user_id: str
) -> dict[str, DeliveryRecord]:
    """The newest record of each key of the subject (a tombstone removes the key)."""
    out: dict[str, DeliveryRecord] = {}
    for msg in messages:
        key = (msg.key() or b"").decode("utf-8", "replace")
        raw = msg.value()
        if raw is None:
            out.pop(key, None)
            continue
        try:
            record = decode_record(codec, raw)
        except (SerdeError, ValueError):
            continue
        if (record.tenant_id, record.user_id) != (tenant_id, user_id) or record.key != key:
            out.pop(key, None)
            continue
        out[key] = record
    return out


def read_deliveries(
    bootstrap: str,
    topology: Topology,
    tenant_id: str,
    user_id: str,
    *,
    state: DeliveryStatus | None = None,
    watcher_id: str | None = None,
    codec: AvroCodec | None = None,
    max_scan: int = DEFAULT_MAX_SCAN,
) -> list[DeliveryRecord]:
    """The subject's deliveries (of ``watcher_id`` only, in ``state`` only), newest first."""
    codec = codec or default_codec()
    topic = topology.name(Topic.DELIVERY_STATE)
    found = _fold(scan(bootstrap, topic, tail=max_scan), codec, tenant_id, user_id)
    return matching(found.values(), state, watcher_id)


def matching(
    records: Iterable[DeliveryRecord], state: DeliveryStatus | None, watcher_id: str | None
) -> list[DeliveryRecord]:
    """The records in ``state`` (None: any) of ``watcher_id`` (None: any), newest first."""
    chosen = [
        r
        for r in records
        if (state is None or r.state.status is state)
        and (watcher_id is None or r.watcher_id == watcher_id)
    ]
    chosen.sort(key=lambda r: (r.state.updated_at, r.key), reverse=True)
    return chosen


def read_delivery(
    bootstrap: str,
    topology: Topology,
    tenant_id: str,
    user_id: str,
    delivery_key: str,
    *,
    codec: AvroCodec | None = None,
    max_scan: int = DEFAULT_MAX_SCAN,
) -> DeliveryRecord | None:
    """One of the subject's deliveries (None for a missing key or another subject's)."""
    codec = codec or default_codec()
    topic = topology.name(Topic.DELIVERY_STATE)
    partition = partition_for(delivery_key, topology.partitions_for(Topic.DELIVERY_STATE))
    messages = (
        msg
        for msg in scan(bootstrap, topic, partitions=(partition,), tail=max_scan)
        if msg.key() == delivery_key.encode("utf-8")
    )
    return _fold(messages, codec, tenant_id, user_id).get(delivery_key)
