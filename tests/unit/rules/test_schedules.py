"""Schedule fires never silently missed: a one-shot fires once however late and then closes, a
cron occurrence that could not fire is a receipt, and lateness reads "due at T, late by D"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.evaluation import Evaluation, evaluate, recorded_budget
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.lifecycle import CloseReason, WatcherStatus
from pipeline.rules.outcomes import Outcome, Reason
from pipeline.rules.schedules import (
    fire_late,
    fire_max_age,
    is_missed_occurrence,
    is_one_shot_fire,
    late_by,
    late_note,
    sent_late_by,
)
from tests.unit.rules.test_evaluation import TENANT, USER, grant, state

pytestmark = pytest.mark.unit

DUE = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
OK = recorded_budget(BudgetVerdict.OK)


def one_shot(**overrides: Any) -> WatcherDefinition:
    body: dict[str, Any] = {
        "watcher_id": "schedule:me:stretch",
        "purpose": "schedule.chat",
        "source": {"kind": "schedule", "at": "2026-11-29T12:00:00Z"},
        "delivery": {"target": "me", "verb": "send", "text": "stretch"},
    }
    body.update(overrides)
    return WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER).with_version(1)


def cron(**overrides: Any) -> WatcherDefinition:
    return one_shot(
        watcher_id="schedule:me:digest",
        source={"kind": "schedule", "cron": "0 12 * * *", "timezone": "UTC"},
        **overrides,
    )


def fire(
    defn: WatcherDefinition,
    *,
    scheduled_at: datetime = DUE,
    observed_at: datetime = DUE,
    late: bool = False,
) -> Evidence:
    """The schedule tick the ticker writes: made at ``observed_at``."""
    return Evidence(
        source_kind=EvidenceKind.SCHEDULE,
        source_id="schedule:me",
        observed_at=observed_at,
        scheduled_at=scheduled_at,
        late=late,
        watcher_key=(TENANT, USER, defn.watcher_id),
    )


def run(
    defn: WatcherDefinition, ev: Evidence, now: datetime, budget: Any = OK, grants: Any = None
) -> Evaluation:
    return evaluate(defn, state(), ev, [grant(defn)] if grants is None else grants, now, budget)


# --- one-shots ---------------------------------------------------------------------------


def test_one_shot_tick_read_past_max_age_still_fires_late_and_closes() -> None:
    """The evaluator was down 6 minutes after the ticker fired on time: not stale, late."""
    defn = one_shot()
    later = DUE + timedelta(minutes=6)
    result = run(defn, fire(defn), later)
    assert (result.outcome, result.reason) == (Outcome.SATISFIED, Reason.CONDITION_TRUE)
    assert result.outbox is not None
    assert result.outbox.late and result.outbox.due_at == DUE
    assert result.close is CloseReason.SATISFIED
    assert result.next_state.status is WatcherStatus.SATISFIED


def test_one_shot_tick_read_weeks_late_still_fires() -> None:
    defn = one_shot()
    result = run(defn, fire(defn), DUE + timedelta(days=20))
    assert result.outbox is not None and result.outbox.late


def test_one_shot_fired_on_time_is_not_late() -> None:
    defn = one_shot()
    result = run(defn, fire(defn), DUE + timedelta(seconds=1))
    assert result.outbox is not None and not result.outbox.late


def test_one_shot_ticked_late_by_the_ticker_is_late_however_fast_it_is_read() -> None:
    defn = one_shot()
    made = DUE + timedelta(hours=1)
    result = run(defn, fire(defn, observed_at=made, late=True), made)
    assert result.outbox is not None and result.outbox.late


def test_one_shot_past_its_expiry_is_not_fired_late() -> None:
    defn = one_shot(expires_at="2026-11-29T11:00:00Z")
    result = run(defn, fire(defn), DUE + timedelta(minutes=6))
    assert result.reason is Reason.EXPIRED and result.outbox is None
    assert result.close is CloseReason.EXPIRED


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("budget", Reason.BUDGET_EXHAUSTED),
        ("skew", Reason.FUTURE_SKEW),
    ],
)
def test_one_shot_that_could_not_fire_closes_with_a_visible_receipt(
    case: str, reason: Reason
) -> None:
    """Its only fire is its last: no schedule stays active after it."""
    defn = one_shot()
    budget = recorded_budget(BudgetVerdict.EXHAUSTED) if case == "budget" else OK
    observed = DUE + timedelta(minutes=5) if case == "skew" else DUE
    result = run(defn, fire(defn, observed_at=observed), DUE, budget=budget)
    assert result.reason is reason and result.outbox is None
    assert result.close is CloseReason.EXPIRED
    assert result.receipt.reason is reason and "closes" in result.receipt.note


def test_one_shot_denied_closes_access_revoked_keeping_its_checkpoint() -> None:
    defn = one_shot()
    result = run(defn, fire(defn), DUE, grants=[])
    assert result.reason is Reason.AUTHORIZATION_DENIED
    assert result.close is CloseReason.ACCESS_REVOKED
    assert result.next_state.checkpoint is None


def test_one_shot_expiry_tick_is_not_its_fire() -> None:
    defn = one_shot(expires_at="2026-11-29T13:00:00Z")
    expiry = fire(defn, scheduled_at=DUE + timedelta(hours=1, microseconds=1))
    assert not is_one_shot_fire(defn, expiry)
    assert is_one_shot_fire(defn, fire(defn))


# --- cron schedules ----------------------------------------------------------------------


def test_cron_occurrence_read_past_max_age_is_stale_says_skipped_and_stays_active() -> None:
    defn = cron()
    result = run(defn, fire(defn), DUE + timedelta(minutes=6))
    assert result.reason is Reason.STALE and result.outbox is None
    assert result.close is None and "skipped" in result.receipt.note


def test_cron_occurrence_ticked_late_is_missed_never_fired() -> None:
    defn = cron()
    made = DUE + timedelta(hours=3)
    result = run(defn, fire(defn, observed_at=made, late=True), made)
    assert (result.outcome, result.reason) == (Outcome.NONE, Reason.MISSED)
    assert result.outbox is None and result.close is None
    assert result.next_state.checkpoint is not None  # advances
    assert "skipped" in result.receipt.note and result.receipt.payload is None


def test_cron_occurrence_read_late_within_max_age_fires_flagged_late() -> None:
    defn = cron()
    result = run(defn, fire(defn), DUE + timedelta(minutes=2))
    assert result.outbox is not None and result.outbox.late and result.outbox.due_at == DUE


def test_max_age_spares_only_a_one_shots_own_fire() -> None:
    assert fire_max_age(one_shot(), fire(one_shot())) is None
    assert fire_max_age(cron(), fire(cron())) == timedelta(minutes=5)
    assert not is_missed_occurrence(one_shot(), fire(one_shot(), late=True))
    assert is_missed_occurrence(cron(), fire(cron(), late=True))


def test_replayed_at_the_recorded_time_the_late_flag_is_the_same() -> None:
    defn = one_shot()
    later = DUE + timedelta(minutes=7)
    first, again = run(defn, fire(defn), later), run(defn, fire(defn), later)
    assert first.outbox is not None and again.outbox is not None
    assert first.outbox.late is again.outbox.late is True
    assert fire_late(fire(defn), later)


# --- lateness ----------------------------------------------------------------------------


def test_late_by_is_none_within_the_grace() -> None:
    assert late_by(DUE, DUE + timedelta(seconds=5)) is None
    assert late_by(DUE, DUE + timedelta(seconds=6)) == timedelta(seconds=6)


def test_sent_late_when_delivery_claims_it_past_the_grace_after_it_existed() -> None:
    """Delivery was down: the entry was written on time but is sent late."""
    claimed = DUE + timedelta(minutes=6, seconds=12)
    assert sent_late_by(DUE, DUE, False, claimed) == timedelta(minutes=6, seconds=12)
    assert sent_late_by(DUE, DUE, False, DUE + timedelta(seconds=1)) is None


def test_a_prompt_answer_made_after_its_due_time_is_not_late_for_the_agents_time() -> None:
    answered = DUE + timedelta(seconds=40)
    assert sent_late_by(DUE, answered, False, answered + timedelta(seconds=1)) is None
    late = sent_late_by(DUE, answered, True, answered + timedelta(seconds=1))
    assert late == timedelta(seconds=41)


def test_late_note_says_when_it_was_due_and_by_how_much() -> None:
    note = late_note(DUE, timedelta(minutes=6, seconds=12, microseconds=500))
    assert note == "due at 2026-11-29T12:00:00Z, late by 6m12s"
    assert late_note(DUE, timedelta(0)).endswith("late by under a second")


@given(
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3650)),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3650)),
    st.booleans(),
)
def test_sent_lateness_is_never_negative_and_late_entries_always_say_so(
    made_after: timedelta, claimed_after: timedelta, late: bool
) -> None:
    created = DUE + made_after
    at = created + claimed_after
    found = sent_late_by(DUE, created, late, at)
    if late:
        assert found == at - DUE
    if found is not None:
        assert found >= timedelta(0)
        assert late_note(DUE, found).startswith("due at 2026-11-29T12:00:00Z, late by ")
