"""Schedule fires that come late or not at all, never silently missed (seed 001 stories 6-7;
DESIGN.md §5, §8, §11). Owns: a one-shot's own fire ignores ``max_age`` and closes it whatever
came of it; a cron tick the ticker made ``late`` is a ``missed`` occurrence, never fired; when a
fire is late (at evaluation, so replay reproduces it, and at delivery's claim) and how that
reads, "due at T, late by D". Which instants are due is ``ticker``'s; check order ``evaluation``'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from pipeline.rules.cron import OneShot, one_shot_status
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.durations import format_duration
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.instants import rfc3339_seconds, utc
from pipeline.rules.lifecycle import CloseReason
from pipeline.rules.outcomes import Reason
from pipeline.rules.sources import ScheduleSource

__all__ = [
    "CLOSED_NOTE",
    "MISSED_NOTE",
    "STALE_NOTE",
    "fire_late",
    "fire_max_age",
    "is_missed_occurrence",
    "is_one_shot",
    "is_one_shot_fire",
    "late_by",
    "late_note",
    "one_shot_close",
    "sent_late_by",
]

# Receipt notes: what ``vigil explain`` says of a fire that did not happen.
MISSED_NOTE: Final = "skipped: due while nothing ran; a cron schedule resumes at its next one"
STALE_NOTE: Final = "skipped: not fired within max_age; a cron schedule resumes at its next one"
CLOSED_NOTE: Final = "a one-shot fires once: this was its fire, so the schedule closes"

# Looked up once: every evaluation asks these, and most evidence is no schedule's fire.
_SCHEDULE: Final = EvidenceKind.SCHEDULE
_NOT_EVALUATED: Final = frozenset({Reason.NOT_ACTIVE, Reason.EXPIRED})


def is_one_shot(definition: WatcherDefinition) -> bool:
    """A schedule with an ``at``: it fires once and is then done."""
    source = definition.source
    return isinstance(source, ScheduleSource) and source.at is not None


def is_one_shot_fire(definition: WatcherDefinition, evidence: Evidence) -> bool:
    """``evidence`` is the one-shot's own fire: a schedule tick at its ``at`` (not its expiry
    tick, which stands for the instant after the deadline)."""
    if evidence.source_kind is not _SCHEDULE:  # first: the evaluator's hot path
        return False
    source = definition.source
    return (
        isinstance(source, ScheduleSource)
        and source.at is not None
        and evidence.scheduled_at == source.at
    )


def one_shot_close(
    definition: WatcherDefinition, evidence: Evidence, reason: Reason
) -> CloseReason | None:
    """How a one-shot closes on its own fire, whatever came of it (its last possible fire):
    ``satisfied`` when it fired, ``access_revoked`` when denied (as a ``once`` watch),
    ``expired`` when it could not fire. ``None`` for other evidence, or when nothing was
    evaluated (paused: the ticker fires it again on resume; expired: that closes it)."""
    if not is_one_shot_fire(definition, evidence) or reason in _NOT_EVALUATED:
        return None
    if reason is Reason.CONDITION_TRUE:
        return CloseReason.SATISFIED
    if reason is Reason.AUTHORIZATION_DENIED:
        return CloseReason.ACCESS_REVOKED
    return CloseReason.EXPIRED


def fire_max_age(definition: WatcherDefinition, evidence: Evidence) -> timedelta | None:
    """How old evidence may be before it is ``stale``; ``None``: never (a one-shot's fire, which
    cannot pile up, so an evaluator down or lagging past ``max_age`` still fires it, late)."""
    if evidence.source_kind is _SCHEDULE and is_one_shot_fire(definition, evidence):
        return None
    return definition.source.max_age


def is_missed_occurrence(definition: WatcherDefinition, evidence: Evidence) -> bool:
    """A cron schedule's tick the ticker made past its grace (due while nothing ran): skipped,
    never fired, so missed fires never pile up and none is a silent gap."""
    if evidence.source_kind is not _SCHEDULE or not evidence.late:
        return False
    source = definition.source
    return isinstance(source, ScheduleSource) and source.cron is not None


def late_by(due_at: datetime, at: datetime) -> timedelta | None:
    """How late something due at ``due_at`` is at ``at``; ``None`` within the grace (the one
    lateness rule, :func:`pipeline.rules.cron.one_shot_status`)."""
    if one_shot_status(due_at, at) is OneShot.LATE:
        return utc(at) - utc(due_at)
    return None


def fire_late(evidence: Evidence, now: datetime) -> bool:
    """A schedule fire decided at ``now`` is late when the ticker made it late or it is judged
    past its due instant's grace (the evaluator was down, rebalancing or lagging)."""
    due = evidence.scheduled_at
    return evidence.late or (due is not None and late_by(due, now) is not None)


def sent_late_by(
    due_at: datetime, created_at: datetime, late: bool, at: datetime
) -> timedelta | None:
    """How late a schedule fire reaches its destination when claimed at ``at``; ``None`` when on
    time. Late when it was decided late, or when the claim came past the grace after the entry
    existed (delivery was down or deferred it) — never for time the entry's own making took (a
    fired prompt's answer exists only once the agent answered)."""
    if not late and late_by(max(utc(due_at), utc(created_at)), at) is None:
        return None
    return max(utc(at) - utc(due_at), timedelta(0))


def late_note(due_at: datetime, late: timedelta | None) -> str:
    """What a person reads on a late fire: ``due at 2026-12-03T09:00:00Z, late by 6m12s`` (just
    when it was due if how late is not known)."""
    if late is None:
        return f"due at {rfc3339_seconds(due_at)}"
    whole = timedelta(seconds=int(late.total_seconds()))
    lateness = format_duration(whole) if whole > timedelta(0) else "under a second"
    return f"due at {rfc3339_seconds(due_at)}, late by {lateness}"
