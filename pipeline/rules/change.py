"""Alerts on change (``mode: change``, DESIGN.md §3): which evaluations of a condition notify.

Owns :class:`ChangePolicy` (``resolved``, ``repeat_after``), :func:`change_step` (the pure
transition over the last known truth: notify on becoming true, quiet while true unless
``repeat_after`` passed, re-arm on false, ``resolved`` when asked) and :func:`recorded_truth` (the
same memory rebuilt from a receipt, for replay). Leaves out the earlier checks, dedupe and building
entries (``evaluation``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from pydantic import field_validator

from pipeline.rules.definition_parts import StrictModel
from pipeline.rules.durations import Duration
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import parse_instant
from pipeline.rules.outcomes import Reason
from pipeline.rules.receipts import Receipt
from pipeline.rules.watcher_state import WatcherState

__all__ = [
    "JUDGED",
    "MIN_REPEAT",
    "PLAIN",
    "ChangePolicy",
    "ChangeStep",
    "Notice",
    "change_step",
    "recorded_truth",
]

MIN_REPEAT: Final = timedelta(minutes=1)
JUDGED: Final = frozenset({Reason.CONDITION_TRUE, Reason.CONDITION_FALSE})
"""The reasons that judged the condition: the only evaluations that move a change watcher."""


class Notice(StrEnum):
    """What one evaluation of a change watcher sends."""

    FIRING = "firing"  # became true after false or unknown
    REPEAT = "repeat"  # still true, and repeat_after passed since the last notification
    RESOLVED = "resolved"  # turned false after true, and resolved notifications are asked
    CLEARED = "cleared"  # turned false after true, no resolved notification asked
    QUIET = "quiet"  # nothing: still true (already notified) or still false

    @property
    def sends(self) -> bool:
        """Whether this notice makes an outbox entry."""
        return self in _SENDS


_SENDS: Final = frozenset({Notice.FIRING, Notice.REPEAT, Notice.RESOLVED})

_TRANSITIONS: Final[dict[tuple[bool | None, bool], Notice]] = {
    (None, True): Notice.FIRING,
    (False, True): Notice.FIRING,
    (True, True): Notice.QUIET,  # REPEAT once repeat_after passed
    (None, False): Notice.QUIET,
    (False, False): Notice.QUIET,
    (True, False): Notice.RESOLVED,  # CLEARED unless resolved is asked
}
"""(last known truth, truth now) → notice; ``None`` is unknown (never judged)."""


class ChangePolicy(StrictModel):
    """Options of a change watcher: a ``resolved`` notification when the condition clears, and
    a reminder every ``repeat_after`` while it stays true (none when left out)."""

    resolved: bool = False
    repeat_after: Duration | None = None

    @field_validator("repeat_after")
    @classmethod
    def _repeat(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < MIN_REPEAT:
            raise DefinitionError("repeat_after is at least 1m", "change.repeat_after")
        return value


PLAIN: Final = ChangePolicy()
"""A change watcher without options: no resolved notification, no reminders."""


@dataclass(frozen=True, slots=True)
class ChangeStep:
    """One transition: what to send, the truth to remember and when it last notified."""

    notice: Notice
    holds: bool
    notified_at: datetime | None


def change_step(
    policy: ChangePolicy,
    last: bool | None,
    notified_at: datetime | None,
    holds: bool,
    at: datetime,
) -> ChangeStep:
    """The transition from ``last`` (the condition's last known truth, ``None``: unknown) when
    it now ``holds`` at instant ``at`` (a poll's scheduled instant, else evaluation time);
    ``notified_at`` is when this watcher last sent a firing or repeat notification."""
    notice = _TRANSITIONS[(last, holds)]
    if notice is Notice.QUIET and holds and _repeat_due(policy, notified_at, at):
        notice = Notice.REPEAT
    elif notice is Notice.RESOLVED and not policy.resolved:
        notice = Notice.CLEARED
    if notice is Notice.FIRING or notice is Notice.REPEAT:
        notified_at = at
    return ChangeStep(notice, holds, notified_at)


def _repeat_due(policy: ChangePolicy, notified_at: datetime | None, at: datetime) -> bool:
    """Whether ``repeat_after`` passed since the last notification (never when unknown)."""
    every = policy.repeat_after
    return every is not None and notified_at is not None and at - notified_at >= every


def recorded_truth(state: WatcherState, receipt: Receipt) -> WatcherState:
    """``state`` after a recorded evaluation that is not evaluated again (replay's seeding):
    the truth it judged and, when it notified of a true condition, its instant. A trigger
    ``state`` already applied moved nothing (the evaluator made it a duplicate)."""
    if receipt.reason not in JUDGED or state.applied(receipt.trigger_key):
        return state
    holds = receipt.reason is Reason.CONDITION_TRUE
    notified = state.notified_at
    if holds and receipt.delivery_key is not None:
        notified = _instant_of(receipt)
    return state.replace(holds=holds, notified_at=notified)


def _instant_of(receipt: Receipt) -> datetime:
    """The instant ``change_step`` was given: the poll's scheduled instant, else evaluation
    time (also for a receipt whose trigger does not say, erased or garbled)."""
    scheduled = receipt.trigger.get("scheduled_at")
    try:
        return receipt.evaluated_at if scheduled is None else parse_instant(scheduled)
    except DefinitionError:
        return receipt.evaluated_at
