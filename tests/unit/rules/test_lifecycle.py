"""The lifecycle state machine: legal moves, illegal moves raise, liveness."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipeline.rules.errors import TransitionError
from pipeline.rules.lifecycle import (
    CloseReason,
    LifecycleEvent,
    WatcherStatus,
    cancel_drops,
    close_event,
    erasure_drops,
    is_closed,
    is_live,
    transition,
)

pytestmark = pytest.mark.unit

S, E = WatcherStatus, LifecycleEvent

LEGAL = [
    (S.PROPOSED, E.APPROVE, S.ACTIVE),
    (S.PROPOSED, E.CANCEL, S.CANCELLED),
    (S.ACTIVE, E.PAUSE, S.PAUSED),
    (S.PAUSED, E.RESUME, S.ACTIVE),
    (S.ACTIVE, E.CANCEL, S.CANCELLED),
    (S.PAUSED, E.CANCEL, S.CANCELLED),
    (S.ACTIVE, E.EXPIRE, S.EXPIRED),
    (S.PAUSED, E.EXPIRE, S.EXPIRED),
    (S.ACTIVE, E.SATISFY, S.SATISFIED),
    (S.ACTIVE, E.TERMINATE, S.TERMINAL_UNSATISFIED),
]


@pytest.mark.parametrize(("before", "event", "after"), LEGAL)
def test_legal_move_reaches_expected_status(
    before: WatcherStatus, event: LifecycleEvent, after: WatcherStatus
) -> None:
    assert transition(before, event) is after


@pytest.mark.parametrize("closed", [s for s in S if not is_live(s)])
@pytest.mark.parametrize("event", list(E))
def test_closed_status_accepts_no_event(closed: WatcherStatus, event: LifecycleEvent) -> None:
    with pytest.raises(TransitionError):
        transition(closed, event)


@pytest.mark.parametrize(
    ("before", "event"),
    [
        (S.PROPOSED, E.PAUSE),
        (S.PROPOSED, E.SATISFY),
        (S.ACTIVE, E.APPROVE),
        (S.ACTIVE, E.RESUME),
        (S.PAUSED, E.PAUSE),
        (S.PAUSED, E.SATISFY),
    ],
)
def test_illegal_live_move_raises_naming_it(before: WatcherStatus, event: LifecycleEvent) -> None:
    with pytest.raises(TransitionError, match=event.value):
        transition(before, event)


def test_live_statuses_are_proposed_active_paused() -> None:
    assert {s for s in S if is_live(s)} == {S.PROPOSED, S.ACTIVE, S.PAUSED}
    assert all(is_closed(s) != is_live(s) for s in S)


@pytest.mark.parametrize(
    ("reason", "after"),
    [
        (CloseReason.SATISFIED, S.SATISFIED),
        (CloseReason.TERMINAL_UNSATISFIED, S.TERMINAL_UNSATISFIED),
        (CloseReason.EXPIRED, S.EXPIRED),
        (CloseReason.ACCESS_REVOKED, S.CANCELLED),
        (CloseReason.CANCELLED, S.CANCELLED),
    ],
)
def test_close_reason_moves_active_watch_to_closed_status(
    reason: CloseReason, after: WatcherStatus
) -> None:
    assert transition(S.ACTIVE, close_event(reason)) is after


def test_a_cancel_drops_its_version_and_earlier_ones_never_a_later_one() -> None:
    assert [cancel_drops(3, version) for version in (1, 3, 4)] == [True, True, False]


def test_an_erasure_drops_what_was_written_up_to_it_never_after() -> None:
    at = datetime(2026, 12, 1, tzinfo=UTC)
    tick = timedelta(microseconds=1)
    assert [erasure_drops(at, written) for written in (at - tick, at, at + tick)] == [
        True,
        True,
        False,
    ]
