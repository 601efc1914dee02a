"""The ``outbox`` record (``schemas/outbox_entry.v2.avsc``; v1 still read): one notification intent,
complete enough that delivery needs nothing else, keyed by its delivery key (DESIGN §2, §4).

Owns its mapping to and from :class:`OutboxEntry`: trigger, text, message and arguments sealed
under the subject's data key (without it the entry reads as ``erased``), durations as
microseconds, the trigger as RFC 8785 text, and everything read back checked here.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from pydantic import ValidationError

from pipeline.records.codec import (
    Codec,
    decoded,
    json_text,
    parse_json,
    string_map,
    strings,
)
from pipeline.records.sealing import Sealer, identity, open_fields, seal_text
from pipeline.rules.backoff import RetryPolicy
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.durations import from_micros, to_micros
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import Outcome
from pipeline.rules.quiet_hours import QuietHours

__all__ = ["OUTBOX_ENTRY", "decode_outbox_entry", "encode_outbox_entry", "outbox_identity"]

OUTBOX_ENTRY: Final = "outbox_entry"


def outbox_identity(delivery_key: str) -> bytes:
    """The associated data of an entry's sealed fields."""
    return identity(OUTBOX_ENTRY, delivery_key)


def encode_outbox_entry(
    codec: Codec, sealer: Sealer, entry: OutboxEntry, trigger_text: str | None = None
) -> bytes:
    """An outbox entry; ``trigger_text`` is its trigger's JSON when the caller has it."""
    owner = subject_owner(entry.tenant_id, entry.user_id)
    content = _sealed_content(entry, trigger_text)
    sealed = seal_text(sealer, owner, outbox_identity(entry.delivery_key), content)
    quiet = entry.quiet_hours
    return codec.encode(
        OUTBOX_ENTRY,
        {
            "delivery_key": entry.delivery_key,
            "tenant_id": entry.tenant_id,
            "user_id": entry.user_id,
            "watcher_id": entry.watcher_id,
            "watcher_version": entry.watcher_version,
            "source_id": entry.source_id,
            "purpose": entry.purpose,
            "trigger": None,
            "outcome": entry.outcome.value,
            "verb": entry.verb,
            "target": entry.target,
            "text": None,
            "args": None,
            "evidence_digest": entry.evidence_digest,
            "evidence_observed_at": entry.evidence_observed_at,
            "due_at": entry.due_at,
            "late": entry.late,
            "created_at": entry.created_at,
            "retry": _retry_value(entry.retry),
            "quiet_hours": None
            if quiet is None
            else {"start": quiet.start, "end": quiet.end, "timezone": quiet.timezone},
            "budgets": None if entry.budgets is None else _budgets_value(entry.budgets),
            "delivery_retention_micros": to_micros(entry.delivery_retention),
            "wake_session": entry.wake_session,
            "session_id": entry.session_id,
            "schedule_name": entry.schedule_name,
            "schedule_time": entry.schedule_time,
            "sealed": sealed,
        },
    )


def _sealed_content(entry: OutboxEntry, trigger_text: str | None) -> str:
    """RFC 8785 of ``{"args", "message", "text", "trigger"}``: keys in order, values canonical
    (``message`` left out when there is none, as entries before templates were written)."""
    args, text, message = entry.args, entry.text, entry.message
    return (
        '{"args":'
        + ("null" if args is None else json_text(list(args), "args"))
        + ("" if message is None else ',"message":' + json_text(message, "message"))
        + ',"text":'
        + ("null" if text is None else json_text(text, "text"))
        + ',"trigger":'
        + (trigger_text or json_text(entry.trigger, "trigger"))
        + "}"
    )


def _retry_value(retry: RetryPolicy) -> dict[str, int]:
    return {
        "max_attempts": retry.max_attempts,
        "base_micros": to_micros(retry.base),
        "cap_micros": to_micros(retry.cap),
    }


def _budgets_value(budgets: BudgetCaps) -> dict[str, int | None]:
    return {
        "window_micros": to_micros(budgets.window),
        "evaluations": budgets.evaluations,
        "deliveries": budgets.deliveries,
        "attempts": budgets.attempts,
        "tokens": budgets.tokens,
        "micro_usd": budgets.micro_usd,
    }


@functools.lru_cache(maxsize=256)
def _retry(max_attempts: int, base_micros: int, cap_micros: int) -> RetryPolicy:
    """Entries of one watcher version share one policy: decoded once, not once per entry."""
    return RetryPolicy(
        max_attempts=max_attempts, base=from_micros(base_micros), cap=from_micros(cap_micros)
    )


@functools.lru_cache(maxsize=256)
def _quiet_hours(start: str, end: str, timezone: str) -> QuietHours:
    return QuietHours(start=start, end=end, timezone=timezone)


def decode_outbox_entry(codec: Codec, sealer: Sealer, data: bytes) -> OutboxEntry:
    """An ``outbox`` value (``erased`` when its key is gone); anything that does not make a
    valid entry is a :class:`SerdeError`."""
    value = decoded(codec, OUTBOX_ENTRY, data)
    sealed = value.pop("sealed", None)
    if sealed is None and any(value.get(name) for name in ("trigger", "text", "args")):
        # An entry's content travels sealed: plaintext is a downgrade erasure could not reach.
        raise SerdeError("outbox entry is not valid: unsealed content")
    if sealed is not None:
        opened = open_fields(sealer, outbox_identity(value["delivery_key"]), sealed)
        if opened is None:
            value.update(trigger={}, text=None, message=None, args=None, erased=True)
        else:
            value.update(
                trigger=opened.get("trigger") or {},
                text=opened.get("text"),
                message=opened.get("message"),
                args=opened.get("args"),
            )
    try:
        return _entry(value)
    except (DefinitionError, ValidationError, KeyError, TypeError, ValueError) as exc:
        raise SerdeError(f"outbox entry is not valid: {str(exc)[:300]}") from None


def _entry(value: dict[str, Any]) -> OutboxEntry:
    retry = value.pop("retry")
    quiet = value.pop("quiet_hours")
    budgets = value.pop("budgets")
    retention = value.pop("delivery_retention_micros")
    trigger = value.pop("trigger")
    text = value.pop("text")
    message = value.pop("message", None)
    outcome = Outcome(value.pop("outcome"))
    args = strings(value.pop("args"), "args")
    if isinstance(trigger, str):  # v1: plaintext JSON
        trigger = parse_json(trigger, "trigger")
    for name, found in (("text", text), ("message", message)):
        if found is not None and not isinstance(found, str):
            raise SerdeError(f"{name} is not a string")
    return OutboxEntry(
        **value,
        outcome=outcome,
        trigger=string_map(trigger or {}, "trigger"),
        text=text,
        message=message,
        args=args,
        retry=_retry(retry["max_attempts"], retry["base_micros"], retry["cap_micros"]),
        quiet_hours=None
        if quiet is None
        else _quiet_hours(quiet["start"], quiet["end"], quiet["timezone"]),
        budgets=None
        if budgets is None
        else BudgetCaps(
            window=from_micros(budgets.pop("window_micros")),
            **budgets,
        ),
        delivery_retention=from_micros(retention),
    )
