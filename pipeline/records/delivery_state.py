"""The ``delivery-state`` record (``schemas/delivery_state.v2.avsc``; v1 still read): the
auditable receipt of a delivery decision (DESIGN §11), keyed by delivery key.

Owns :class:`DeliveryRecord` — a :class:`~pipeline.rules.dispatch.DeliveryState` plus the few
fields of its outbox entry that delivery needs without decoding the entry (subject, watcher,
target, retention, where the entry was read) — and its Avro mapping. Every decision is
``pipeline.rules.dispatch``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from pipeline.records.codec import Codec, decoded
from pipeline.rules.dispatch import DeferReason, DeliveryState, pending
from pipeline.rules.durations import from_micros, to_micros
from pipeline.rules.errors import SerdeError
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import DeliveryStatus, ErrorCode, SuppressReason

__all__ = ["DELIVERY_STATE", "DeliveryRecord", "decode_record", "encode_record", "first_record"]

DELIVERY_STATE: Final = "delivery_state"


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


def encode_record(codec: Codec, record: DeliveryRecord) -> bytes:
    state = record.state
    return codec.encode(
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
            "delivery_retention_micros": to_micros(record.delivery_retention),
            "outbox_offset": record.outbox_offset,
            "redeliveries": state.redeliveries,
        },
    )


def _reason(status: DeliveryStatus, text: str | None) -> DeferReason | SuppressReason | None:
    if text is None:
        return None
    return SuppressReason(text) if status is DeliveryStatus.SUPPRESSED else DeferReason(text)


def decode_record(codec: Codec, data: bytes) -> DeliveryRecord:
    """A ``delivery-state`` value; raises :class:`SerdeError` for anything else."""
    value = decoded(codec, DELIVERY_STATE, data)
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
        redeliveries=value.get("redeliveries", 0),
    )
    return DeliveryRecord(
        state=state,
        tenant_id=value["tenant_id"],
        user_id=value["user_id"],
        watcher_id=value["watcher_id"],
        watcher_version=value["watcher_version"],
        target=value["target"],
        delivery_retention=from_micros(value["delivery_retention_micros"]),
        outbox_offset=value["outbox_offset"],
        detail=value["detail"],
    )
