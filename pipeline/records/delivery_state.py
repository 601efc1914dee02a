"""The delivery consumer's records on the wire: ``delivery-state`` values and what it reads of
``lifecycle`` (``schemas/delivery_state.v1.avsc``, ``lifecycle.v1.avsc``).

Owns :class:`DeliveryRecord` — a :class:`~pipeline.rules.dispatch.DeliveryState` plus the few
fields of its outbox entry that delivery needs without decoding the entry (subject, watcher,
target, retention, where the entry was read) — and its Avro mapping, and
:class:`LifecycleRecord`, the part of a ``lifecycle`` record that decides whether undelivered
entries are dropped. Outbox entries themselves are ``pipeline.records.evaluator``'s.

Leaves out the bytes framing (``pipeline.kafka.serde``) and every decision
(``pipeline.rules.dispatch``, ``consumers.delivery.loop``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from pipeline.kafka.serde import SchemaRegistry
from pipeline.rules.dispatch import DeferReason, DeliveryState, pending
from pipeline.rules.errors import SerdeError
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import DeliveryStatus, ErrorCode, SuppressReason

__all__ = [
    "DELIVERY_STATE",
    "ERASED",
    "LIFECYCLE",
    "DeliveryRecord",
    "LifecycleRecord",
    "decode_lifecycle",
    "decode_record",
    "encode_record",
    "first_record",
]

DELIVERY_STATE: Final = "delivery_state"
LIFECYCLE: Final = "lifecycle"
ERASED: Final = "erased"  # the status of a subject-wide lifecycle record
_MICRO: Final = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """What ``delivery-state`` holds for one delivery key."""

    state: DeliveryState
    tenant_id: str
    user_id: str
    watcher_id: str
    watcher_version: int
    target: str
    delivery_retention: timedelta
    outbox_offset: int = -1
    detail: str | None = None  # categorical: a deny reason, a budget dimension

    @property
    def key(self) -> str:
        return self.state.delivery_key

    def moved(self, state: DeliveryState, detail: str | None = None) -> DeliveryRecord:
        """This record in a new state (``detail`` describes the new state's reason only)."""
        return DeliveryRecord(
            state,
            self.tenant_id,
            self.user_id,
            self.watcher_id,
            self.watcher_version,
            self.target,
            self.delivery_retention,
            self.outbox_offset,
            detail,
        )


def first_record(entry: OutboxEntry, offset: int, now: datetime) -> DeliveryRecord:
    """The first state of a new outbox entry: ``pending``, due when the entry says."""
    return DeliveryRecord(
        state=pending(entry.delivery_key, entry.due_at, now),
        tenant_id=entry.tenant_id,
        user_id=entry.user_id,
        watcher_id=entry.watcher_id,
        watcher_version=entry.watcher_version,
        target=entry.target,
        delivery_retention=entry.delivery_retention,
        outbox_offset=offset,
    )


def encode_record(registry: SchemaRegistry, record: DeliveryRecord) -> bytes:
    state = record.state
    return registry.encode(
        DELIVERY_STATE,
        {
            "delivery_key": state.delivery_key,
            "tenant_id": record.tenant_id,
            "user_id": record.user_id,
            "watcher_id": record.watcher_id,
            "watcher_version": record.watcher_version,
            "target": record.target,
            "status": state.status.value,
            "attempt": state.attempt,
            "due_at": state.due_at,
            "created_at": state.created_at,
            "updated_at": state.updated_at,
            "reason": None if state.reason is None else state.reason.value,
            "detail": record.detail,
            "last_error": None if state.last_error is None else state.last_error.value,
            "delivered_at": state.delivered_at,
            "settled_at": state.settled_at,
            "delivery_retention_micros": record.delivery_retention // _MICRO,
            "outbox_offset": record.outbox_offset,
        },
    )


def _reason(status: DeliveryStatus, text: str | None) -> DeferReason | SuppressReason | None:
    if text is None:
        return None
    return SuppressReason(text) if status is DeliveryStatus.SUPPRESSED else DeferReason(text)


def decode_record(registry: SchemaRegistry, data: bytes) -> DeliveryRecord:
    """A ``delivery-state`` value; raises :class:`SerdeError` for anything else."""
    record_type, value = registry.decode(data)
    if record_type != DELIVERY_STATE:
        raise SerdeError(f"expected a delivery_state record, got {record_type}")
    try:
        return _from_value(value)
    except (KeyError, ValueError) as exc:
        raise SerdeError(f"delivery_state record is not valid: {exc}") from exc


def _from_value(value: dict[str, Any]) -> DeliveryRecord:
    status = DeliveryStatus(value["status"])
    error = value["last_error"]
    state = DeliveryState(
        delivery_key=value["delivery_key"],
        status=status,
        attempt=value["attempt"],
        due_at=value["due_at"],
        created_at=value["created_at"],
        updated_at=value["updated_at"],
        reason=_reason(status, value["reason"]),
        last_error=None if error is None else ErrorCode(error),
        delivered_at=value["delivered_at"],
        settled_at=value["settled_at"],
    )
    return DeliveryRecord(
        state=state,
        tenant_id=value["tenant_id"],
        user_id=value["user_id"],
        watcher_id=value["watcher_id"],
        watcher_version=value["watcher_version"],
        target=value["target"],
        delivery_retention=value["delivery_retention_micros"] * _MICRO,
        outbox_offset=value["outbox_offset"],
        detail=value["detail"],
    )


@dataclass(frozen=True, slots=True)
class LifecycleRecord:
    """A watcher's lifecycle state, or (``watcher_id is None``) a subject's erasure."""

    tenant_id: str
    user_id: str
    watcher_id: str | None
    version: int
    status: str  # a WatcherStatus value, or ERASED
    at: datetime

    @property
    def erasure(self) -> bool:
        return self.watcher_id is None and self.status == ERASED

    @property
    def drops_anything(self) -> bool:
        return self.erasure or self.status == WatcherStatus.CANCELLED.value

    def drops(self, record: DeliveryRecord, created_at: datetime) -> bool:
        """Whether an undelivered entry of ``record`` must be dropped (``cancelled``).

        A cancelled watcher drops its entries up to its cancelled version (a later version
        reuses the id and is another watcher, DESIGN.md §10); an erasure drops the subject's
        entries created up to the erasure. Expired and satisfied watchers still deliver what
        they decided before closing (§10 "Expiry vs. the deadline notification").
        """
        if (record.tenant_id, record.user_id) != (self.tenant_id, self.user_id):
            return False
        if self.watcher_id is None:
            return self.status == ERASED and created_at <= self.at
        return (
            self.watcher_id == record.watcher_id
            and self.status == WatcherStatus.CANCELLED.value
            and record.watcher_version <= self.version
        )


def decode_lifecycle(registry: SchemaRegistry, data: bytes) -> LifecycleRecord:
    record_type, value = registry.decode(data)
    if record_type != LIFECYCLE:
        raise SerdeError(f"expected a lifecycle record, got {record_type}")
    scope = value["scope"]
    watcher_id = value["watcher_id"] if scope == "watcher" else None
    if scope == "watcher" and watcher_id is None:
        raise SerdeError("a watcher lifecycle record without a watcher_id")
    return LifecycleRecord(
        tenant_id=value["tenant_id"],
        user_id=value["user_id"],
        watcher_id=watcher_id,
        version=value["version"],
        status=value["status"],
        at=value["at"],
    )
