"""The delivery state machine and the pre-dispatch decision (DESIGN.md §4, §8, §11)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from pipeline.rules.backoff import RetryPolicy, backoff_wait
from pipeline.rules.budgets import BudgetVerdict, Dimension, window_end
from pipeline.rules.dispatch import (
    DeferReason,
    DeliveryState,
    DispatchAction,
    DispatchPlan,
    attempt_cost,
    attempt_token_for,
    cancel,
    claim,
    defer,
    fail,
    give_up,
    is_settled,
    pending,
    plan_attempt,
    purge_due,
    redeliver,
    restore,
    succeed,
    suppress,
)
from pipeline.rules.errors import DefinitionError, TransitionError
from pipeline.rules.outcomes import DeliveryStatus, ErrorCode, SuppressReason
from pipeline.rules.quiet_hours import QuietHours

pytestmark = pytest.mark.unit

KEY = "d8df8ea3ef289f91ed6f1413ff71391ff3564fb87935198b25f9f9916e3e6c94"
T0 = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy()
HOUR = timedelta(hours=1)


def fresh() -> DeliveryState:
    return pending(KEY, T0, T0)


def plan(
    state: DeliveryState,
    now: datetime,
    *,
    authorized: bool = True,
    quiet_hours: QuietHours | None = None,
    attempt_budget: BudgetVerdict | None = BudgetVerdict.OK,
    delivery_budget: BudgetVerdict = BudgetVerdict.OK,
    closed: bool = False,
) -> DispatchPlan:
    """plan_attempt with everything allowing dispatch unless a test says otherwise."""
    return plan_attempt(
        state,
        now=now,
        authorized=authorized,
        quiet_hours=quiet_hours,
        attempt_budget=attempt_budget,
        delivery_budget=delivery_budget,
        closed=closed,
        window_end=window_end(now, HOUR),
    )


def test_claim_then_succeed_delivers_and_settles() -> None:
    claimed = claim(fresh(), T0)
    assert (claimed.status, claimed.attempt) == (DeliveryStatus.DISPATCHING, 1)
    done = succeed(claimed, T0 + timedelta(seconds=1))
    assert done.status is DeliveryStatus.DELIVERED
    assert done.delivered_at == done.settled_at == T0 + timedelta(seconds=1)
    assert done.delivery_key == KEY
    assert is_settled(done)


def test_claim_before_due_raises() -> None:
    with pytest.raises(TransitionError, match="before it is due"):
        claim(pending(KEY, T0 + timedelta(seconds=1), T0), T0)


def test_three_failures_then_success_wait_the_backoff_of_section_8() -> None:
    state, now, waits = fresh(), T0, []
    for _ in range(3):
        state = claim(state, now)
        state = fail(state, ErrorCode.HTTP_5XX, now, policy=POLICY)
        assert state.status is DeliveryStatus.PENDING
        assert state.reason is DeferReason.BACKOFF
        assert state.last_error is ErrorCode.HTTP_5XX
        waits.append(state.due_at - now)
        now = state.due_at
    state = succeed(claim(state, now), now)
    assert state.status is DeliveryStatus.DELIVERED
    assert state.attempt == 4
    assert waits == [backoff_wait(KEY, n, POLICY.base, POLICY.cap) for n in (1, 2, 3)]
    assert [round(w.total_seconds(), 6) for w in waits] == [5.299917, 10.509605, 20.711534]


def test_retry_after_longer_than_backoff_sets_the_next_due_time() -> None:
    state = fail(claim(fresh(), T0), ErrorCode.HTTP_429, T0, policy=POLICY, retry_after=HOUR)
    assert state.due_at == T0 + HOUR


def test_eighth_failure_dead_letters_and_no_further_attempt_happens() -> None:
    state, now = fresh(), T0
    for attempt in range(1, 9):
        state = fail(claim(state, now), ErrorCode.TIMEOUT, now, policy=POLICY)
        if attempt < 8:
            assert state.status is DeliveryStatus.PENDING
            now = state.due_at
    assert state.status is DeliveryStatus.DEAD_LETTER
    assert (state.attempt, state.last_error) == (8, ErrorCode.TIMEOUT)
    with pytest.raises(TransitionError, match="dead_letter"):
        claim(state, now + HOUR * 24)


def test_smaller_retry_ceiling_dead_letters_sooner() -> None:
    state = fail(claim(fresh(), T0), ErrorCode.CONNECT, T0, policy=RetryPolicy(max_attempts=1))
    assert state.status is DeliveryStatus.DEAD_LETTER


@pytest.mark.parametrize("code", [ErrorCode.HTTP_410, ErrorCode.HTTP_4XX, ErrorCode.REJECTED])
def test_terminal_error_dead_letters_at_once(code: ErrorCode) -> None:
    state = fail(claim(fresh(), T0), code, T0, policy=POLICY)
    assert (state.status, state.attempt, state.last_error) == (DeliveryStatus.DEAD_LETTER, 1, code)
    assert state.settled_at == T0


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.TIMEOUT,
        ErrorCode.CONNECT,
        ErrorCode.TLS,
        ErrorCode.HTTP_429,
        ErrorCode.HTTP_5XX,
        ErrorCode.UNAVAILABLE,
        ErrorCode.INTERNAL,
    ],
)
def test_retryable_error_returns_to_pending(code: ErrorCode) -> None:
    assert fail(claim(fresh(), T0), code, T0, policy=POLICY).status is DeliveryStatus.PENDING


def test_restore_after_restart_returns_dispatching_to_pending_with_same_key_and_attempt() -> None:
    claimed = claim(fail(claim(fresh(), T0), ErrorCode.TIMEOUT, T0, policy=POLICY), T0 + HOUR)
    restored = restore(claimed)
    assert restored.status is DeliveryStatus.PENDING
    assert (restored.delivery_key, restored.attempt) == (KEY, 2)
    assert claim(restored, T0 + HOUR).attempt == 3


def test_restore_leaves_other_states_unchanged() -> None:
    for state in (fresh(), succeed(claim(fresh(), T0), T0), cancel(fresh(), T0)):
        assert restore(state) is state


def test_defer_keeps_pending_with_later_due_time_and_reason() -> None:
    later = defer(fresh(), T0 + HOUR, DeferReason.QUIET_HOURS, T0)
    assert (later.status, later.due_at, later.reason) == (
        DeliveryStatus.PENDING,
        T0 + HOUR,
        DeferReason.QUIET_HOURS,
    )


def test_purge_due_is_settlement_plus_retention_and_refuses_unsettled_work() -> None:
    settled = suppress(fresh(), SuppressReason.WATCHER_CLOSED, T0)
    assert purge_due(settled, timedelta(days=2)) == T0 + timedelta(days=2)
    for unsettled in (fresh(), claim(fresh(), T0)):
        assert not is_settled(unsettled)
        with pytest.raises(TransitionError, match="never purged"):
            purge_due(unsettled, timedelta(days=2))


def _all_states() -> dict[DeliveryStatus, DeliveryState]:
    claimed = claim(fresh(), T0)
    return {
        DeliveryStatus.PENDING: fresh(),
        DeliveryStatus.DISPATCHING: claimed,
        DeliveryStatus.DELIVERED: succeed(claimed, T0),
        DeliveryStatus.DEAD_LETTER: fail(claimed, ErrorCode.HTTP_410, T0, policy=POLICY),
        DeliveryStatus.SUPPRESSED: suppress(fresh(), SuppressReason.BUDGET_EXHAUSTED, T0),
        DeliveryStatus.CANCELLED: cancel(fresh(), T0),
    }


MOVES: dict[str, Callable[[DeliveryState], DeliveryState]] = {
    "claim": lambda s: claim(s, T0),
    "succeed": lambda s: succeed(s, T0),
    "fail_retry": lambda s: fail(s, ErrorCode.TIMEOUT, T0, policy=POLICY),
    "fail_terminal": lambda s: fail(s, ErrorCode.HTTP_410, T0, policy=POLICY),
    "defer": lambda s: defer(s, T0 + HOUR, DeferReason.ATTEMPT_CEILING, T0),
    "suppress": lambda s: suppress(s, SuppressReason.AUTHORIZATION_DENIED, T0),
    "cancel": lambda s: cancel(s, T0),
    "give_up": lambda s: give_up(s, ErrorCode.INTERNAL, T0),
}
LEGAL = {
    (DeliveryStatus.PENDING, "claim"),
    (DeliveryStatus.PENDING, "defer"),
    (DeliveryStatus.PENDING, "suppress"),
    (DeliveryStatus.PENDING, "cancel"),
    (DeliveryStatus.PENDING, "give_up"),
    (DeliveryStatus.DISPATCHING, "succeed"),
    (DeliveryStatus.DISPATCHING, "fail_retry"),
    (DeliveryStatus.DISPATCHING, "fail_terminal"),
}


@pytest.mark.parametrize(
    ("status", "move"),
    [pair for pair in itertools.product(DeliveryStatus, MOVES) if pair not in LEGAL],
)
def test_every_illegal_transition_raises_naming_both_states(
    status: DeliveryStatus, move: str
) -> None:
    with pytest.raises(TransitionError) as info:
        MOVES[move](_all_states()[status])
    assert f"from {status.value} to " in str(info.value)


@pytest.mark.parametrize(("status", "move"), sorted(LEGAL))
def test_every_legal_transition_succeeds(status: DeliveryStatus, move: str) -> None:
    assert MOVES[move](_all_states()[status]).delivery_key == KEY


def test_plan_for_closed_watcher_cancels_before_anything_else() -> None:
    result = plan(fresh(), T0, closed=True, authorized=False)
    assert result.action is DispatchAction.CANCEL
    assert result.state.status is DeliveryStatus.CANCELLED


def test_plan_after_authorization_lost_suppresses_with_auditable_reason() -> None:
    result = plan(fresh(), T0, authorized=False)
    assert result.action is DispatchAction.SUPPRESS
    assert result.state.status is DeliveryStatus.SUPPRESSED
    assert result.state.reason is SuppressReason.AUTHORIZATION_DENIED


def test_plan_inside_quiet_hours_defers_to_next_allowed_instant() -> None:
    # 22:00-07:00 in Berlin; T0 + 10h is 23:00 local (UTC+1 in March before the switch).
    quiet = QuietHours.parse("22:00", "07:00", "Europe/Berlin")
    now = T0 + timedelta(hours=10)
    result = plan(fresh(), now, quiet_hours=quiet)
    assert result.action is DispatchAction.DEFER
    assert result.state.due_at == datetime(2026, 3, 9, 6, 0, tzinfo=UTC)
    assert result.state.reason is DeferReason.QUIET_HOURS


def test_plan_outside_quiet_hours_dispatches() -> None:
    quiet = QuietHours.parse("22:00", "07:00", "Europe/Berlin")
    result = plan(fresh(), T0, quiet_hours=quiet)
    assert result.action is DispatchAction.DISPATCH
    assert result.state.status is DeliveryStatus.DISPATCHING
    assert result.state.attempt == 1


def test_plan_without_budget_verdict_asks_for_a_charge_and_changes_nothing() -> None:
    state = fresh()
    result = plan(state, T0, attempt_budget=None)
    assert result.action is DispatchAction.CHARGE_BUDGET
    assert result.state is state


def test_plan_at_attempt_ceiling_defers_to_next_window_start() -> None:
    now = T0 + timedelta(minutes=17)
    result = plan(fresh(), now, attempt_budget=BudgetVerdict.EXHAUSTED)
    assert result.action is DispatchAction.DEFER
    assert result.state.due_at == T0 + HOUR
    assert result.state.reason is DeferReason.ATTEMPT_CEILING
    assert result.state.attempt == 0


def test_plan_with_unique_deliveries_exhausted_at_first_attempt_suppresses() -> None:
    result = plan(fresh(), T0, delivery_budget=BudgetVerdict.EXHAUSTED)
    assert result.action is DispatchAction.SUPPRESS
    assert result.state.reason is SuppressReason.BUDGET_EXHAUSTED


def test_plan_ignores_unique_delivery_budget_after_the_first_attempt() -> None:
    retried = fail(claim(fresh(), T0), ErrorCode.TIMEOUT, T0, policy=POLICY)
    result = plan(retried, retried.due_at, delivery_budget=BudgetVerdict.EXHAUSTED)
    assert result.action is DispatchAction.DISPATCH
    assert result.state.attempt == 2


def test_plan_with_budget_store_down_defers_briefly_never_dispatches() -> None:
    result = plan(fresh(), T0, attempt_budget=BudgetVerdict.UNAVAILABLE)
    assert result.action is DispatchAction.DEFER
    assert result.state.reason is DeferReason.BUDGET_UNAVAILABLE
    assert T0 < result.state.due_at <= T0 + timedelta(minutes=5)


def test_plan_of_entry_not_yet_due_raises() -> None:
    with pytest.raises(TransitionError, match="before it is due"):
        plan(pending(KEY, T0 + HOUR, T0), T0)


def test_attempt_cost_counts_a_unique_delivery_only_on_the_first_attempt() -> None:
    first = fresh()
    assert attempt_cost(first) == {Dimension.DELIVERIES: 1, Dimension.ATTEMPTS: 1}
    retried = fail(claim(first, T0), ErrorCode.TIMEOUT, T0, policy=POLICY)
    assert attempt_cost(retried) == {Dimension.ATTEMPTS: 1}
    assert attempt_token_for(first) != attempt_token_for(retried)


def test_retry_policy_reads_duration_text_and_refuses_cap_below_base() -> None:
    policy = RetryPolicy.model_validate({"max_attempts": 3, "base": "10s", "cap": "2m"})
    assert (policy.base, policy.cap) == (timedelta(seconds=10), timedelta(minutes=2))
    with pytest.raises(DefinitionError, match="base <= cap"):
        RetryPolicy.model_validate({"base": "1h", "cap": "1m"})


# --- redeliver ------------------------------------------------------------------------------


def _dead() -> DeliveryState:
    state = fresh()
    for _ in range(2):
        state = fail(claim(state, T0), ErrorCode.HTTP_5XX, T0, policy=POLICY)
        state = replace(state, due_at=T0)
    return fail(claim(state, T0), ErrorCode.HTTP_410, T0, policy=POLICY)


def test_redeliver_makes_a_dead_letter_pending_now_with_a_fresh_attempt_count_same_key() -> None:
    dead = _dead()
    assert dead.status is DeliveryStatus.DEAD_LETTER and dead.attempt == 3
    now = T0 + HOUR
    again = redeliver(dead, now)
    assert again.status is DeliveryStatus.PENDING
    assert (again.delivery_key, again.attempt, again.redeliveries) == (KEY, 0, 1)
    assert (again.due_at, again.updated_at) == (now, now)
    assert again.last_error is None and again.settled_at is None and again.reason is None
    assert again.created_at == dead.created_at
    assert attempt_cost(again) == {Dimension.ATTEMPTS: 1, Dimension.DELIVERIES: 1}
    assert attempt_token_for(again) != attempt_token_for(fresh()), "charged afresh"
    claimed = claim(again, now)
    assert claimed.attempt == 1 and claimed.redeliveries == 1


def test_redeliver_applies_to_a_suppressed_entry_and_to_nothing_unsettled_or_delivered() -> None:
    suppressed = suppress(fresh(), SuppressReason.BUDGET_EXHAUSTED, T0)
    assert redeliver(suppressed, T0).status is DeliveryStatus.PENDING
    delivered = succeed(claim(fresh(), T0), T0)
    for state in (fresh(), claim(fresh(), T0), delivered, cancel(fresh(), T0)):
        with pytest.raises(TransitionError, match="cannot redeliver"):
            redeliver(state, T0)
