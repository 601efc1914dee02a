"""The watcher lifecycle state machine (DESIGN.md §3, seed 000 and 003).

``proposed → active ⇄ paused → cancelled | expired | satisfied | terminal_unsatisfied``.
This module owns the states, the events that move between them and the table (an illegal
move raises :class:`TransitionError`), and what a cancel or an erasure drops, which the
evaluator's and delivery's lifecycle views both ask. Who may trigger a move (principals,
grants) is ``authz``; when the evaluator closes a watch is ``evaluation``.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pipeline.rules.errors import TransitionError

__all__ = [
    "CloseReason",
    "LifecycleEvent",
    "WatcherStatus",
    "cancel_drops",
    "close_event",
    "erasure_drops",
    "is_closed",
    "is_live",
    "transition",
]


class WatcherStatus(StrEnum):
    PROPOSED = "proposed"
    ACTIVE = "active"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    SATISFIED = "satisfied"
    TERMINAL_UNSATISFIED = "terminal_unsatisfied"


class LifecycleEvent(StrEnum):
    APPROVE = "approve"
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    EXPIRE = "expire"
    SATISFY = "satisfy"
    TERMINATE = "terminate"


class CloseReason(StrEnum):
    """Why a watch closed: carried by the ``close`` command the evaluator emits (§10)."""

    SATISFIED = "satisfied"
    TERMINAL_UNSATISFIED = "terminal_unsatisfied"
    EXPIRED = "expired"
    ACCESS_REVOKED = "access_revoked"
    CANCELLED = "cancelled"


_TABLE: dict[tuple[WatcherStatus, LifecycleEvent], WatcherStatus] = {
    (WatcherStatus.PROPOSED, LifecycleEvent.APPROVE): WatcherStatus.ACTIVE,
    (WatcherStatus.PROPOSED, LifecycleEvent.CANCEL): WatcherStatus.CANCELLED,
    (WatcherStatus.PROPOSED, LifecycleEvent.EXPIRE): WatcherStatus.EXPIRED,
    (WatcherStatus.ACTIVE, LifecycleEvent.PAUSE): WatcherStatus.PAUSED,
    (WatcherStatus.ACTIVE, LifecycleEvent.CANCEL): WatcherStatus.CANCELLED,
    (WatcherStatus.ACTIVE, LifecycleEvent.EXPIRE): WatcherStatus.EXPIRED,
    (WatcherStatus.ACTIVE, LifecycleEvent.SATISFY): WatcherStatus.SATISFIED,
    (WatcherStatus.ACTIVE, LifecycleEvent.TERMINATE): WatcherStatus.TERMINAL_UNSATISFIED,
    (WatcherStatus.PAUSED, LifecycleEvent.RESUME): WatcherStatus.ACTIVE,
    (WatcherStatus.PAUSED, LifecycleEvent.CANCEL): WatcherStatus.CANCELLED,
    (WatcherStatus.PAUSED, LifecycleEvent.EXPIRE): WatcherStatus.EXPIRED,
}

_LIVE = frozenset({WatcherStatus.PROPOSED, WatcherStatus.ACTIVE, WatcherStatus.PAUSED})

_CLOSE_EVENTS: dict[CloseReason, LifecycleEvent] = {
    CloseReason.SATISFIED: LifecycleEvent.SATISFY,
    CloseReason.TERMINAL_UNSATISFIED: LifecycleEvent.TERMINATE,
    CloseReason.EXPIRED: LifecycleEvent.EXPIRE,
    CloseReason.ACCESS_REVOKED: LifecycleEvent.CANCEL,
    CloseReason.CANCELLED: LifecycleEvent.CANCEL,
}


def transition(status: WatcherStatus, event: LifecycleEvent) -> WatcherStatus:
    """The status after ``event``; a move the table does not list raises ``TransitionError``."""
    try:
        return _TABLE[(status, event)]
    except KeyError:
        raise TransitionError(f"cannot {event.value} a watcher that is {status.value}") from None


def close_event(reason: CloseReason) -> LifecycleEvent:
    """The lifecycle event a ``close`` command with ``reason`` applies."""
    return _CLOSE_EVENTS[reason]


def is_live(status: WatcherStatus) -> bool:
    """Live watchers hold their id: create refuses it, caps count it (§10)."""
    return status in _LIVE


def is_closed(status: WatcherStatus) -> bool:
    return status not in _LIVE


def cancel_drops(cancelled_version: int, version: int) -> bool:
    """Whether cancelling a watcher at ``cancelled_version`` drops what belongs to ``version`` of
    it (its state, its undelivered entries): that version and earlier ones, never a later one,
    which reuses the id and is another watcher (DESIGN.md §10)."""
    return version <= cancelled_version


def erasure_drops(erased_at: datetime, written_at: datetime) -> bool:
    """Whether a subject's erasure at ``erased_at`` drops something of theirs written at
    ``written_at`` (an entry's creation, a state's last update): what was written up to the
    erasure; what comes after is new (DESIGN.md §10)."""
    return written_at <= erased_at
