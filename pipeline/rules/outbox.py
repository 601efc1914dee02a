"""The outbox entry: one notification intent, complete enough that delivery needs nothing else.

Owns :class:`OutboxEntry`, keyed in ``vigil.outbox`` by its delivery key (DESIGN.md §2, §4):
subject, version, trigger, verb and arguments, the rendered message, retry policy, quiet hours,
budget caps and retention. An entry read back without its data key is ``erased`` and never sent.
Creating one is ``evaluation``'s (or the command processor's); dispatch states are
``dispatch``'s."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple

from pipeline.rules.backoff import RetryPolicy
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.evidence import Evidence, trigger_json
from pipeline.rules.message import MessageFields, default_message, render
from pipeline.rules.outcomes import Outcome
from pipeline.rules.quiet_hours import QuietHours
from pipeline.rules.schedules import fire_late, sent_late_by

__all__ = ["OutboxEntry", "as_sent", "build_entry", "message_of"]


class OutboxEntry(NamedTuple):
    """A decided delivery. ``trigger`` is ``{"kind", ...identity fields}``.

    A plain named tuple (no validation here, and built once per notifying evaluation, where a
    frozen dataclass's constructor cost 4 µs): the evaluator and the command processor build it
    from values the rules already checked, and ``pipeline.records.outbox_entry`` checks what it
    reads back before it builds one. Build it with keywords (``build_entry``, once per
    notification, builds it with ``_make`` in field order); the fields with defaults come
    last."""

    delivery_key: str
    tenant_id: str
    user_id: str
    watcher_id: str
    watcher_version: int
    source_id: str
    purpose: str
    trigger: dict[str, str]
    outcome: Outcome
    verb: str
    target: str
    due_at: datetime
    created_at: datetime
    retry: RetryPolicy
    delivery_retention: timedelta
    text: str | None = None
    message: str | None = None  # a notify's rendered message; None before templates existed
    args: tuple[str, ...] | None = None
    evidence_digest: str | None = None
    evidence_observed_at: datetime | None = None
    late: bool = False
    quiet_hours: QuietHours | None = None
    budgets: BudgetCaps | None = None
    wake_session: bool = False
    session_id: str | None = None
    schedule_name: str | None = None
    schedule_time: datetime | None = None
    erased: bool = False  # read back after the subject's data key was shredded: no content


def build_entry(
    definition: WatcherDefinition,
    evidence: Evidence,
    key: str,
    now: datetime,
    identity: dict[str, str] | None = None,
    digest: str | None = None,
    outcome: Outcome = Outcome.SATISFIED,
    kept: dict[str, Any] | None = None,
) -> OutboxEntry:
    """The outbox entry for a decision that notifies (satisfied; a change watcher's
    ``resolved``): everything delivery needs, frozen now. ``identity`` (the trigger object),
    ``digest`` (the evidence digest) and ``kept`` (the payload's leaves the privacy allowlist
    keeps) are computed here unless the caller already has them (the evaluator has)."""
    fields = definition.entry_fields
    is_schedule = fields.schedule_name is not None
    scheduled_at = evidence.scheduled_at if is_schedule else None
    due_at = scheduled_at or now
    message = message_of(definition, evidence, outcome, due_at, kept) if fields.notify else None
    return OutboxEntry._make(  # in field order: no keywords to match, once per notification
        (
            key,  # delivery_key
            *fields[:6],  # tenant_id, user_id, watcher_id, watcher_version, source_id, purpose
            trigger_json(evidence.trigger()) if identity is None else identity,  # trigger
            outcome,
            *fields[6:8],  # verb, target
            due_at,
            now,  # created_at
            *fields[8:11],  # retry, delivery_retention, text
            message,
            fields.args,
            evidence.digest() if digest is None else digest,  # evidence_digest
            evidence.observed_at,  # evidence_observed_at
            is_schedule and fire_late(evidence, now),  # late
            *fields[12:16],  # quiet_hours, budgets, wake_session, session_id
            fields.schedule_name,
            scheduled_at,  # schedule_time
            False,  # erased
        )
    )


def message_of(
    definition: WatcherDefinition,
    evidence: Evidence,
    outcome: Outcome,
    due_at: datetime,
    kept: dict[str, Any] | None = None,
) -> str:
    """The message of a decision: ``delivery.message`` rendered, or the default message, over
    the payload leaves the privacy allowlist keeps (never more than the receipt; ``kept``:
    those leaves, when the caller has them)."""
    fields = MessageFields(
        watcher_id=definition.watcher_id,
        purpose=definition.purpose,
        outcome=outcome.value,
        observed_at=evidence.observed_at,
        due_at=due_at,
        payload=evidence.payload,
        retained=definition.privacy.paths,
        event_type=evidence.event_type,
        event_id=evidence.event_id,
        kept=kept,
    )
    template = definition.delivery.template
    return default_message(fields) if template is None else render(template, fields)


def as_sent(entry: OutboxEntry, claimed_at: datetime) -> OutboxEntry:
    """The entry as its destination reads it when claimed at ``claimed_at``: a schedule's fire
    decided on time but claimed past its grace (delivery was down or deferred it) is ``late``
    (``pipeline.rules.schedules.sent_late_by``); any other entry is itself."""
    if entry.late or entry.schedule_time is None:
        return entry
    if sent_late_by(entry.due_at, entry.created_at, False, claimed_at) is None:
        return entry
    return entry._replace(late=True)
