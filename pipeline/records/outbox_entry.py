"""The ``outbox`` record (``schemas/outbox_entry.v2.avsc``; v1 still read): one notification
intent, complete enough that delivery needs nothing else, keyed by its delivery key (DESIGN §2,
§4). The trigger, text and arguments are sealed under the subject's data key (associated data:
the delivery key); without that key the entry reads as ``erased``.

Written by the evaluator (its hot loop encodes straight from ``Evaluation.outbox_fields``: the
same bytes, no model built), by the command processor (immediate ``send``) and by delivery (a
prompt's answer); read by delivery, replay and explain. Durations travel as microseconds, the
trigger as RFC 8785 JSON text.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from pipeline.records.codec import MICRO, Codec, decoded, json_text, micros, parse_json
from pipeline.records.sealing import Sealer, identity, open_fields, seal_text
from pipeline.rules.backoff import RetryPolicy
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.data_keys import subject_owner
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
    codec: Codec,
    sealer: Sealer,
    entry: OutboxEntry | Mapping[str, Any],
    trigger_text: str | None = None,
) -> bytes:
    """An outbox entry, or its fields as ``Evaluation.outbox_fields`` holds them."""
    fields = entry if isinstance(entry, dict) else dict(entry)
    budgets: BudgetCaps | None = fields["budgets"]
    quiet: QuietHours | None = fields["quiet_hours"]
    retry: RetryPolicy = fields["retry"]
    args = fields["args"]
    text = fields["text"]
    # RFC 8785 of {"args", "text", "trigger"}: keys in order, values canonical.
    content = (
        '{"args":'
        + ("null" if args is None else json_text(list(args), "args"))
        + ',"text":'
        + ("null" if text is None else json_text(text, "text"))
        + ',"trigger":'
        + (trigger_text or json_text(fields["trigger"], "trigger"))
        + "}"
    )
    owner = subject_owner(fields["tenant_id"], fields["user_id"])
    sealed = seal_text(sealer, owner, outbox_identity(fields["delivery_key"]), content)
    return codec.encode(
        OUTBOX_ENTRY,
        {
            "delivery_key": fields["delivery_key"],
            "tenant_id": fields["tenant_id"],
            "user_id": fields["user_id"],
            "watcher_id": fields["watcher_id"],
            "watcher_version": fields["watcher_version"],
            "source_id": fields["source_id"],
            "purpose": fields["purpose"],
            "trigger": None,
            "outcome": fields["outcome"].value,
            "verb": fields["verb"],
            "target": fields["target"],
            "text": None,
            "args": None,
            "evidence_digest": fields["evidence_digest"],
            "evidence_observed_at": fields["evidence_observed_at"],
            "due_at": fields["due_at"],
            "late": fields["late"],
            "created_at": fields["created_at"],
            "retry": {
                "max_attempts": retry.max_attempts,
                "base_micros": micros(retry.base),
                "cap_micros": micros(retry.cap),
            },
            "quiet_hours": None
            if quiet is None
            else {"start": quiet.start, "end": quiet.end, "timezone": quiet.timezone},
            "budgets": None
            if budgets is None
            else {
                "window_micros": micros(budgets.window),
                "evaluations": budgets.evaluations,
                "deliveries": budgets.deliveries,
                "attempts": budgets.attempts,
                "tokens": budgets.tokens,
                "micro_usd": budgets.micro_usd,
            },
            "delivery_retention_micros": micros(fields["delivery_retention"]),
            "wake_session": fields["wake_session"],
            "session_id": fields["session_id"],
            "schedule_name": fields["schedule_name"],
            "schedule_time": fields["schedule_time"],
            "sealed": sealed,
        },
    )


@functools.lru_cache(maxsize=256)
def _retry(max_attempts: int, base_micros: int, cap_micros: int) -> RetryPolicy:
    """Entries of one watcher version share one policy: decoded once, not once per entry."""
    return RetryPolicy(max_attempts=max_attempts, base=base_micros * MICRO, cap=cap_micros * MICRO)


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
            value.update(trigger={}, text=None, args=None, erased=True)
        else:
            value.update(
                trigger=opened.get("trigger") or {},
                text=opened.get("text"),
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
    args = value.pop("args")
    trigger = value["trigger"]
    return OutboxEntry(
        **{
            **value,
            "trigger": parse_json(trigger or "{}", "trigger")
            if trigger is None or isinstance(trigger, str)
            else trigger,
            "outcome": Outcome(value["outcome"]),
        },
        args=None if args is None else tuple(args),
        retry=_retry(retry["max_attempts"], retry["base_micros"], retry["cap_micros"]),
        quiet_hours=None
        if quiet is None
        else _quiet_hours(quiet["start"], quiet["end"], quiet["timezone"]),
        budgets=None
        if budgets is None
        else BudgetCaps(
            window=budgets.pop("window_micros") * MICRO,
            **budgets,
        ),
        delivery_retention=retention * MICRO,
    )
