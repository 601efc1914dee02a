"""Every outcome and every reason code of DESIGN.md §11 is produced by some evaluation."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.evaluation import Evaluation, recorded_budget
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.outcomes import ErrorCode, Outcome, Reason
from tests.unit.rules.test_evaluation import (
    NOW,
    event,
    event_definition,
    poll,
    run_agent,
    run_event,
    state,
)
from tests.unit.rules.test_schedules import cron, fire

pytestmark = pytest.mark.unit

CASES: dict[str, Callable[[], Evaluation]] = {
    "paused": lambda: run_event(st=state(WatcherStatus.PAUSED)),
    "past expiry": lambda: run_event(defn=event_definition(expires_at="2026-01-01T00:00:00Z")),
    "no grant": lambda: run_event(grants=[]),
    "wrong event type": lambda: run_event(ev=event(event_type="build.started")),
    "cron occurrence missed": lambda: run_event(cron(), ev=fire(cron(), late=True)),
    "old event": lambda: run_event(ev=event(observed_at=NOW - timedelta(hours=1))),
    "event from the future": lambda: run_event(ev=event(observed_at=NOW + timedelta(minutes=1))),
    "budget spent": lambda: run_event(budget=recorded_budget(BudgetVerdict.EXHAUSTED)),
    "evaluator gone": lambda: run_agent(poll({"status": "succeeded"}), evaluators=frozenset()),
    "tool failed": lambda: run_agent(poll({}, tool_error=ErrorCode.HTTP_5XX)),
    "false": lambda: run_event(ev=event({"status": "passed"})),
    "impossible": lambda: run_agent(poll({"status": "failed"})),
    "true": lambda: run_event(),
    "cleared": lambda: run_event(
        defn=event_definition(mode="change"),
        st=state().replace(holds=True),
        ev=event({"status": "passed"}),
    ),
}


@pytest.fixture(scope="module")
def results() -> dict[str, Evaluation]:
    return {name: case() for name, case in CASES.items()}


def test_every_reason_code_is_produced(results: dict[str, Evaluation]) -> None:
    produced = {result.reason for result in results.values()}
    assert produced == set(Reason)


def test_every_outcome_is_produced(results: dict[str, Evaluation]) -> None:
    produced = {result.outcome for result in results.values()}
    assert produced == set(Outcome)


@pytest.mark.parametrize("reason", list(Reason))
def test_receipt_records_the_reason_it_was_decided_by(
    reason: Reason, results: dict[str, Evaluation]
) -> None:
    matching = [r for r in results.values() if r.reason is reason]
    assert matching, f"no case produces {reason.value}"
    assert all(r.receipt.reason is reason for r in matching)


def test_payload_is_kept_only_for_condition_outcomes(results: dict[str, Evaluation]) -> None:
    judged = {Reason.CONDITION_FALSE, Reason.TERMINAL_CONDITION, Reason.CONDITION_TRUE}
    for result in results.values():
        assert (result.receipt.payload is not None) == (result.reason in judged), result.reason


def test_only_authorization_denied_leaves_the_checkpoint(results: dict[str, Evaluation]) -> None:
    for result in results.values():
        advanced = result.next_state.checkpoint is not None
        assert advanced == (result.reason is not Reason.AUTHORIZATION_DENIED), result.reason
