"""The outbox entry: one notification intent, complete enough that delivery needs nothing else.

Owns :class:`OutboxEntry`, keyed in ``vigil.outbox`` by its delivery key (DESIGN.md §2, §4).
It carries the subject, the watcher version, the trigger, the verb and its arguments, the
retry policy, quiet hours, budget caps and retention, so the delivery consumer never reads a
definition. Creating one is ``evaluation``'s (or the command processor's for immediate verbs);
dispatch states are ``dispatch``'s.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.evidence import Evidence, trigger_json
from pipeline.rules.outcomes import Outcome
from pipeline.rules.sources import ScheduleSource

__all__ = ["OutboxEntry", "OutboxQuietHours", "OutboxRetry", "build_entry", "entry_fields"]


class OutboxRetry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int
    base: timedelta
    cap: timedelta


class OutboxQuietHours(BaseModel):
    """Quiet hours as written (``HH:MM``, IANA zone); ``quiet_hours`` parses them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: str
    end: str
    timezone: str


class OutboxEntry(BaseModel):
    """A decided delivery. ``trigger`` is ``{"kind", ...identity fields}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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
    text: str | None = None
    args: tuple[str, ...] | None = None
    evidence_digest: str | None = None
    evidence_observed_at: datetime | None = None
    due_at: datetime
    late: bool = False
    created_at: datetime
    retry: OutboxRetry
    quiet_hours: OutboxQuietHours | None = None
    budgets: BudgetCaps | None = None
    delivery_retention: timedelta
    wake_session: bool = False
    session_id: str | None = None
    schedule_name: str | None = None
    schedule_time: datetime | None = None


@functools.lru_cache(maxsize=256)
def _retry(max_attempts: int, base: timedelta, cap: timedelta) -> OutboxRetry:
    """One frozen model per distinct policy: entries share it instead of validating anew."""
    return OutboxRetry(max_attempts=max_attempts, base=base, cap=cap)


def build_entry(
    definition: WatcherDefinition, evidence: Evidence, key: str, now: datetime
) -> OutboxEntry:
    """The outbox entry for a satisfied decision: everything delivery needs, frozen now."""
    identity = trigger_json(evidence.trigger())
    return OutboxEntry(**entry_fields(definition, evidence, key, now, identity, evidence.digest()))


def entry_fields(
    definition: WatcherDefinition,
    evidence: Evidence,
    key: str,
    now: datetime,
    identity: dict[str, str],
    digest: str,
) -> dict[str, Any]:
    """:func:`build_entry`'s fields (``OutboxEntry``'s keyword arguments), unvalidated, for a
    caller that already has the trigger object and the evidence digest and may only write
    them (the evaluator's hot loop)."""
    assert definition.version is not None
    delivery = definition.delivery
    quiet = delivery.quiet_hours
    retry = definition.retry
    is_schedule = isinstance(definition.source, ScheduleSource)
    return {
        "delivery_key": key,
        "tenant_id": definition.tenant_id,
        "user_id": definition.user_id,
        "watcher_id": definition.watcher_id,
        "watcher_version": definition.version,
        "source_id": definition.source_id,
        "purpose": definition.purpose,
        "trigger": identity,
        "outcome": Outcome.SATISFIED,
        "verb": delivery.verb.value,
        "target": delivery.target,
        "text": delivery.text,
        "args": delivery.args,
        "evidence_digest": digest,
        "evidence_observed_at": evidence.observed_at,
        "due_at": evidence.scheduled_at if is_schedule and evidence.scheduled_at else now,
        "late": evidence.late,
        "created_at": now,
        "retry": _retry(retry.max_attempts, retry.base, retry.cap),
        "quiet_hours": None
        if quiet is None
        else OutboxQuietHours(start=quiet.start, end=quiet.end, timezone=quiet.timezone),
        "budgets": definition.budgets,
        "delivery_retention": definition.privacy.delivery_retention,
        "wake_session": delivery.wake_session,
        "session_id": definition.session_id,
        "schedule_name": definition.watcher_id.rsplit(":", 1)[-1] if is_schedule else None,
        "schedule_time": evidence.scheduled_at if is_schedule else None,
    }
