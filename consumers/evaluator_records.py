"""The evaluator's records on the wire: events and ticks in, watcher-state, receipts and outbox
entries out (``schemas/{watcher_state,receipt,outbox_entry}.v1.avsc``).

Owns the mapping between the pure models (:class:`Evidence`, :class:`WatcherState`,
:class:`Receipt`, :class:`OutboxEntry`) and their Avro records: instants as
``timestamp-micros``, durations as microseconds, triggers and payloads as RFC 8785 canonical
JSON strings. The delivery consumer decodes outbox entries with :func:`decode_outbox_entry`.
Also the ``close`` command the evaluator emits when it closes a watch (system principal).

Leaves out the bytes framing (``pipeline.kafka.serde``), topics and what is decided.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Final

from consumers.evaluator_index import Watch
from pipeline.authz import Principal, Role
from pipeline.budgets import BudgetCaps
from pipeline.commands import Command, CommandVerb
from pipeline.errors import SerdeError
from pipeline.evidence import Evidence, EvidenceKind
from pipeline.kafka.serde import SchemaRegistry
from pipeline.keys import canonical_json
from pipeline.lifecycle import CloseReason, WatcherStatus
from pipeline.outbox import OutboxEntry, OutboxQuietHours, OutboxRetry
from pipeline.outcomes import ErrorCode, Outcome, Reason
from pipeline.receipts import Receipt
from pipeline.watcher_state import Checkpoint, WatcherState

__all__ = [
    "EXPIRY_STEP",
    "OUTBOX_ENTRY",
    "RECEIPT",
    "SYSTEM_PRINCIPAL",
    "WATCHER_STATE",
    "SharedEvidence",
    "close_command",
    "decode_outbox_entry",
    "decode_receipt",
    "decode_state",
    "encode_outbox_entry",
    "encode_receipt",
    "encode_state",
    "evidence_from_event",
    "evidence_from_tick",
    "position_of",
]

WATCHER_STATE: Final = "watcher_state"
RECEIPT: Final = "receipt"
OUTBOX_ENTRY: Final = "outbox_entry"
_MICRO: Final = timedelta(microseconds=1)
# An expiry tick stands for the first instant after the deadline, so it always reads "expired"
# (the final evaluation *at* the deadline is the ticker's ordinary poll tick).
EXPIRY_STEP: Final = timedelta(microseconds=1)


def _json_text(value: Any) -> str:
    return canonical_json(value).decode("utf-8")


def _trigger_text(trigger: dict[str, str]) -> str:
    """A trigger object as JSON. Its keys are fixed ASCII names and its values strings, for
    which sorted compact ``json.dumps`` is byte-for-byte RFC 8785, at a fraction of the cost."""
    return json.dumps(trigger, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _micros(value: timedelta) -> int:
    return value // _MICRO


def position_of(topic: str, partition: int, offset: int) -> str:
    """The opaque input position a checkpoint and a receipt record."""
    return f"{topic}:{partition}:{offset}"


# --- inputs ----------------------------------------------------------------------------------


class SharedEvidence(Evidence):
    """Evidence whose digest is computed once: every watcher an input reaches asks for it, for
    its receipt and again for its outbox entry, and RFC 8785 of a payload is not cheap."""

    __slots__ = ("_digest",)
    _digest: str

    def digest(self) -> str:
        try:
            return self._digest
        except AttributeError:
            digest = Evidence.digest(self)
            object.__setattr__(self, "_digest", digest)
            return digest


def evidence_from_event(value: dict[str, Any], position: str) -> Evidence:
    """An ``event`` record as evidence; a payload that is not a JSON object is undecodable."""
    payload = _payload(value.get("payload"))
    return SharedEvidence(
        source_kind=EvidenceKind.EVENT,
        source_id=value["source_id"],
        observed_at=value["observed_at"],
        event_type=value["event_type"],
        event_id=value["event_id"],
        envelope_id=value.get("envelope_id"),
        cursor=value.get("cursor"),
        payload=payload,
        position=position,
    )


def evidence_from_tick(value: dict[str, Any], position: str) -> Evidence:
    """A ``tick`` record as evidence naming its watcher (DESIGN.md §10: ticks belong to one)."""
    kind = value["kind"]
    scheduled: datetime = value["scheduled_at"]
    if kind == "expiry":
        scheduled = scheduled + EXPIRY_STEP
    error = value.get("tool_error")
    return SharedEvidence(
        source_kind=EvidenceKind.POLL if kind == "poll" else EvidenceKind.SCHEDULE,
        source_id=value["source_id"],
        observed_at=value["observed_at"],
        scheduled_at=scheduled,
        payload=_payload(value.get("payload")),
        watcher_key=(value["tenant_id"], value["user_id"], value["watcher_id"]),
        tool_error=None if error is None else ErrorCode(error),
        late=bool(value.get("late", False)),
        tokens=int(value.get("usage_tokens", 0)),
        micro_usd=int(value.get("usage_micro_usd", 0)),
        position=position,
    )


def _payload(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise SerdeError(f"payload is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise SerdeError("payload is not a JSON object")
    return payload


# --- watcher-state ---------------------------------------------------------------------------


def encode_state(
    registry: SchemaRegistry,
    key: tuple[str, str, str],
    source_id: str,
    state: WatcherState,
    updated_at: datetime,
) -> bytes:
    checkpoint = state.checkpoint
    return registry.encode(
        WATCHER_STATE,
        {
            "tenant_id": key[0],
            "user_id": key[1],
            "watcher_id": key[2],
            "source_id": source_id,
            "version": state.version,
            "status": state.status.value,
            "activated_at": state.activated_at,
            "checkpoint": None
            if checkpoint is None
            else {
                "trigger_key": checkpoint.trigger_key,
                "trigger": _trigger_text(checkpoint.trigger),
                "observed_at": checkpoint.observed_at,
                "position": checkpoint.position,
            },
            "recent_triggers": list(state.recent_triggers),
            "last_outcome": None if state.last_outcome is None else state.last_outcome.value,
            "last_reason": None if state.last_reason is None else state.last_reason.value,
            "evaluations": state.evaluations,
            "closed_reason": None if state.closed_reason is None else state.closed_reason.value,
            "revision": state.revision,
            "updated_at": updated_at,
        },
    )


def decode_state(registry: SchemaRegistry, data: bytes) -> WatcherState:
    record_type, value = registry.decode(data)
    if record_type != WATCHER_STATE:
        raise SerdeError(f"expected a watcher_state record, got {record_type}")
    raw = value["checkpoint"]
    checkpoint = None
    if raw is not None:
        checkpoint = Checkpoint(
            trigger_key=raw["trigger_key"],
            trigger=json.loads(raw["trigger"]),
            observed_at=raw["observed_at"],
            position=raw["position"],
        )
    return WatcherState(
        version=value["version"],
        status=WatcherStatus(value["status"]),
        activated_at=value["activated_at"],
        checkpoint=checkpoint,
        recent_triggers=tuple(value["recent_triggers"]),
        last_outcome=None if value["last_outcome"] is None else Outcome(value["last_outcome"]),
        last_reason=None if value["last_reason"] is None else Reason(value["last_reason"]),
        evaluations=value["evaluations"],
        closed_reason=None
        if value["closed_reason"] is None
        else CloseReason(value["closed_reason"]),
        revision=value["revision"],
    )


# --- receipts --------------------------------------------------------------------------------


def encode_receipt(registry: SchemaRegistry, receipt: Receipt, source_id: str) -> bytes:
    return registry.encode(
        RECEIPT,
        {
            "tenant_id": receipt.tenant_id,
            "user_id": receipt.user_id,
            "watcher_id": receipt.watcher_id,
            "watcher_version": receipt.watcher_version,
            "source_id": source_id,
            "evaluated_at": receipt.evaluated_at,
            "outcome": receipt.outcome.value,
            "reason": receipt.reason.value,
            "evidence_digest": receipt.evidence_digest,
            "trigger": _trigger_text(receipt.trigger),
            "trigger_key": receipt.trigger_key,
            "observed_at": receipt.observed_at,
            "position": receipt.position,
            "authorized": receipt.authorized,
            "authorization": receipt.authorization,
            "budget": None if receipt.budget is None else receipt.budget.value,
            "tool_error": None if receipt.tool_error is None else receipt.tool_error.value,
            "payload": None if receipt.payload is None else _json_text(receipt.payload),
            "delivery_key": receipt.delivery_key,
            "note": receipt.note,
        },
    )


def decode_receipt(registry: SchemaRegistry, data: bytes) -> tuple[Receipt, str]:
    """The receipt and the source id it was evaluated on."""
    record_type, value = registry.decode(data)
    if record_type != RECEIPT:
        raise SerdeError(f"expected a receipt record, got {record_type}")
    fields = {k: v for k, v in value.items() if k != "source_id"}
    fields["trigger"] = json.loads(value["trigger"])
    fields["payload"] = None if value["payload"] is None else json.loads(value["payload"])
    return Receipt.model_validate(fields), value["source_id"]


# --- outbox ----------------------------------------------------------------------------------


def encode_outbox_entry(registry: SchemaRegistry, entry: OutboxEntry) -> bytes:
    budgets = entry.budgets
    quiet = entry.quiet_hours
    return registry.encode(
        OUTBOX_ENTRY,
        {
            "delivery_key": entry.delivery_key,
            "tenant_id": entry.tenant_id,
            "user_id": entry.user_id,
            "watcher_id": entry.watcher_id,
            "watcher_version": entry.watcher_version,
            "source_id": entry.source_id,
            "purpose": entry.purpose,
            "trigger": _trigger_text(entry.trigger),
            "outcome": entry.outcome.value,
            "verb": entry.verb,
            "target": entry.target,
            "text": entry.text,
            "args": None if entry.args is None else list(entry.args),
            "evidence_digest": entry.evidence_digest,
            "evidence_observed_at": entry.evidence_observed_at,
            "due_at": entry.due_at,
            "late": entry.late,
            "created_at": entry.created_at,
            "retry": {
                "max_attempts": entry.retry.max_attempts,
                "base_micros": _micros(entry.retry.base),
                "cap_micros": _micros(entry.retry.cap),
            },
            "quiet_hours": None
            if quiet is None
            else {"start": quiet.start, "end": quiet.end, "timezone": quiet.timezone},
            "budgets": None
            if budgets is None
            else {
                "window_micros": _micros(budgets.window),
                "evaluations": budgets.evaluations,
                "deliveries": budgets.deliveries,
                "attempts": budgets.attempts,
                "tokens": budgets.tokens,
                "micro_usd": budgets.micro_usd,
            },
            "delivery_retention_micros": _micros(entry.delivery_retention),
            "wake_session": entry.wake_session,
            "session_id": entry.session_id,
            "schedule_name": entry.schedule_name,
            "schedule_time": entry.schedule_time,
        },
    )


def decode_outbox_entry(registry: SchemaRegistry, data: bytes) -> OutboxEntry:
    record_type, value = registry.decode(data)
    if record_type != OUTBOX_ENTRY:
        raise SerdeError(f"expected an outbox_entry record, got {record_type}")
    retry = value.pop("retry")
    quiet = value.pop("quiet_hours")
    budgets = value.pop("budgets")
    retention = value.pop("delivery_retention_micros")
    args = value.pop("args")
    return OutboxEntry(
        **{
            **value,
            "trigger": json.loads(value["trigger"]),
            "outcome": Outcome(value["outcome"]),
        },
        args=None if args is None else tuple(args),
        retry=OutboxRetry(
            max_attempts=retry["max_attempts"],
            base=retry["base_micros"] * _MICRO,
            cap=retry["cap_micros"] * _MICRO,
        ),
        quiet_hours=None if quiet is None else OutboxQuietHours(**quiet),
        budgets=None
        if budgets is None
        else BudgetCaps(
            window=budgets.pop("window_micros") * _MICRO,
            **budgets,
        ),
        delivery_retention=retention * _MICRO,
    )


# --- close commands ----------------------------------------------------------------------

SYSTEM_PRINCIPAL: Final = Principal(
    name="vigil-evaluator", role=Role.SYSTEM, tenant_id="-", user_id="-"
)


def close_command(watch: Watch, reason: CloseReason, trigger_key: str, now: datetime) -> Command:
    """The ``close`` command of a watch the evaluator closed (system principal, DESIGN.md §10).

    The request id derives from the closing evidence, so a replayed close is the same request.
    """
    tenant_id, user_id, watcher_id = watch.parts
    return Command(
        request_id=f"close:{trigger_key[:48]}",
        verb=CommandVerb.CLOSE,
        principal=SYSTEM_PRINCIPAL,
        tenant_id=tenant_id,
        user_id=user_id,
        issued_at=now,
        watcher_id=watcher_id,
        version=watch.version,
        reason=reason,
    )
