"""The evaluator's records on the wire: events and ticks in, watcher-state, receipts and outbox
entries out (``schemas/{watcher_state,receipt,outbox_entry}.v1.avsc``).

Owns the mapping between the pure models (:class:`Evidence`, :class:`WatcherState`,
:class:`Receipt`, :class:`OutboxEntry`) and their Avro records: instants as
``timestamp-micros``, durations as microseconds, triggers and payloads as RFC 8785 canonical
JSON strings. Receipts and outbox entries encode from their models or, in the evaluator's hot
loop, straight from ``Evaluation.receipt_fields`` / ``outbox_fields`` (the same bytes, no model
built). The delivery consumer decodes outbox entries with :func:`decode_outbox_entry`.
Also the ``close`` command the evaluator emits when it closes a watch (system principal).

Leaves out the bytes framing (``pipeline.kafka.serde``), topics and what is decided.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from pipeline.kafka.serde import SchemaRegistry
from pipeline.rules.authz import Principal, Role
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.commands.apply import Command, CommandVerb
from pipeline.rules.errors import SerdeError
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.keys import canonical_json
from pipeline.rules.lifecycle import CloseReason, WatcherStatus
from pipeline.rules.outbox import OutboxEntry, OutboxQuietHours, OutboxRetry
from pipeline.rules.outcomes import ErrorCode, Outcome, Reason
from pipeline.rules.receipts import Receipt
from pipeline.rules.watcher_state import Checkpoint, WatcherState
from pipeline.runtime.views import Watch

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
    "trigger_json_text",
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


def trigger_json_text(trigger: Mapping[str, str]) -> str:
    """A trigger object as its RFC 8785 JSON text (how records carry it)."""
    return canonical_json(trigger).decode("utf-8")


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
    trigger_text: str | None = None,
) -> bytes:
    """``trigger_text``: the checkpoint trigger's JSON, when the caller has it."""
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
                "trigger": trigger_text or trigger_json_text(checkpoint.trigger),
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


def encode_receipt(
    registry: SchemaRegistry,
    receipt: Receipt | Mapping[str, Any],
    source_id: str,
    trigger_text: str | None = None,
) -> bytes:
    """A receipt, or its fields as ``Evaluation.receipt_fields`` holds them (the hot path:
    no model is built). ``trigger_text`` is the trigger's JSON when the caller has it."""
    fields = receipt if isinstance(receipt, dict) else dict(receipt)
    budget = fields["budget"]
    tool_error = fields["tool_error"]
    payload = fields["payload"]
    return registry.encode(
        RECEIPT,
        {
            "tenant_id": fields["tenant_id"],
            "user_id": fields["user_id"],
            "watcher_id": fields["watcher_id"],
            "watcher_version": fields["watcher_version"],
            "source_id": source_id,
            "evaluated_at": fields["evaluated_at"],
            "outcome": fields["outcome"].value,
            "reason": fields["reason"].value,
            "evidence_digest": fields["evidence_digest"],
            "trigger": trigger_text or trigger_json_text(fields["trigger"]),
            "trigger_key": fields["trigger_key"],
            "observed_at": fields["observed_at"],
            "position": fields["position"],
            "authorized": fields["authorized"],
            "authorization": fields["authorization"],
            "budget": None if budget is None else budget.value,
            "tool_error": None if tool_error is None else tool_error.value,
            "payload": None if payload is None else _json_text(payload),
            "delivery_key": fields["delivery_key"],
            "note": fields["note"],
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


def encode_outbox_entry(
    registry: SchemaRegistry,
    entry: OutboxEntry | Mapping[str, Any],
    trigger_text: str | None = None,
) -> bytes:
    """An outbox entry, or its fields as ``Evaluation.outbox_fields`` holds them."""
    fields = entry if isinstance(entry, dict) else dict(entry)
    budgets: BudgetCaps | None = fields["budgets"]
    quiet: OutboxQuietHours | None = fields["quiet_hours"]
    retry: OutboxRetry = fields["retry"]
    args = fields["args"]
    return registry.encode(
        OUTBOX_ENTRY,
        {
            "delivery_key": fields["delivery_key"],
            "tenant_id": fields["tenant_id"],
            "user_id": fields["user_id"],
            "watcher_id": fields["watcher_id"],
            "watcher_version": fields["watcher_version"],
            "source_id": fields["source_id"],
            "purpose": fields["purpose"],
            "trigger": trigger_text or trigger_json_text(fields["trigger"]),
            "outcome": fields["outcome"].value,
            "verb": fields["verb"],
            "target": fields["target"],
            "text": fields["text"],
            "args": None if args is None else list(args),
            "evidence_digest": fields["evidence_digest"],
            "evidence_observed_at": fields["evidence_observed_at"],
            "due_at": fields["due_at"],
            "late": fields["late"],
            "created_at": fields["created_at"],
            "retry": {
                "max_attempts": retry.max_attempts,
                "base_micros": _micros(retry.base),
                "cap_micros": _micros(retry.cap),
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
            "delivery_retention_micros": _micros(fields["delivery_retention"]),
            "wake_session": fields["wake_session"],
            "session_id": fields["session_id"],
            "schedule_name": fields["schedule_name"],
            "schedule_time": fields["schedule_time"],
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
