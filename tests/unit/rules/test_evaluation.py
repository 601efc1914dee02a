"""evaluate(): every branch of DESIGN.md §3 and §11, in order, with checkpoints and receipts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipeline.rules.authz import Action, Grant
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import BudgetStoreError, DefinitionError
from pipeline.rules.evaluation import Evaluation, evaluate, recorded_budget
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.keys import EventTrigger, delivery_key
from pipeline.rules.lifecycle import CloseReason, WatcherStatus
from pipeline.rules.outcomes import ErrorCode, Outcome, Reason
from pipeline.rules.watcher_state import RECENT_TRIGGERS, WatcherState
from tests.vectors import VECTORS

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TENANT, USER = "acme", "u-42"
EVALUATOR = "workflow.run.status@v1"


def event_definition(**overrides: Any) -> WatcherDefinition:
    body: dict[str, Any] = {
        "watcher_id": "release-build-failed",
        "purpose": "ops.alert",
        "source": {
            "kind": "event",
            "source_id": "ci.pipeline",
            "event_type": "build.finished",
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "ops-hook", "verb": "notify"},
        "expires_at": "2027-06-01T00:00:00Z",
        "privacy": {"retain_paths": ["status"]},
    }
    body.update(overrides)
    return WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER).with_version(1)


def agent_definition(**overrides: Any) -> WatcherDefinition:
    body: dict[str, Any] = {
        "watcher_id": "run-r-81-done",
        "purpose": "agent.watch",
        "mode": "once",
        "source": {
            "kind": "polling",
            "source_id": "run:r-81",
            "tool": EVALUATOR,
            "target": "r-81",
            "cadence": "5m",
            "max_age": "2m",
        },
        "condition": {"eq": ["status", "succeeded"]},
        "terminal_condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "in-app", "verb": "notify", "wake_session": True},
        "window": "1h",
        "session_id": "s-1",
    }
    body.update(overrides)
    return WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER).with_version(2)


def schedule_definition() -> WatcherDefinition:
    body = {
        "watcher_id": "schedule:me:standup",
        "purpose": "schedule.chat",
        "source": {"kind": "schedule", "at": "2026-11-29T12:00:00Z"},
        "delivery": {"target": "me", "verb": "send", "text": "standup"},
    }
    return WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER).with_version(1)


def grant(defn: WatcherDefinition, **overrides: Any) -> Grant:
    fields: dict[str, Any] = {
        "grant_id": "g-1",
        "tenant_id": defn.tenant_id,
        "user_id": defn.user_id,
        "purpose": defn.purpose,
        "sources": frozenset({defn.source_id}),
        "tools": frozenset({EVALUATOR}),
        "targets": frozenset({defn.delivery.target}),
        "actions": frozenset({Action.EVALUATE, Action.DELIVER}),
        "until": NOW + timedelta(days=30),
    }
    fields.update(overrides)
    return Grant(**fields)


def state(
    status: WatcherStatus = WatcherStatus.ACTIVE, activated_at: datetime | None = None
) -> WatcherState:
    return WatcherState(version=1, status=status, activated_at=activated_at or NOW)


def event(
    payload: dict[str, Any] | None = None, observed_at: datetime = NOW, **overrides: Any
) -> Evidence:
    fields: dict[str, Any] = {
        "source_kind": EvidenceKind.EVENT,
        "source_id": "ci.pipeline",
        "event_type": "build.finished",
        "event_id": "b-981",
        "envelope_id": "env-1",
        "cursor": "981",
        "observed_at": observed_at,
        "payload": {"status": "failed", "secret": "x"} if payload is None else payload,
        "position": "vigil.events-0-17",
    }
    fields.update(overrides)
    return Evidence(**fields)


def poll(payload: dict[str, Any], scheduled_at: datetime = NOW, **overrides: Any) -> Evidence:
    fields: dict[str, Any] = {
        "source_kind": EvidenceKind.POLL,
        "source_id": "run:r-81",
        "observed_at": scheduled_at,
        "scheduled_at": scheduled_at,
        "payload": payload,
        "watcher_key": (TENANT, USER, "run-r-81-done"),
    }
    fields.update(overrides)
    return Evidence(**fields)


OK = recorded_budget(BudgetVerdict.OK)


def run_event(
    defn: WatcherDefinition | None = None,
    st: WatcherState | None = None,
    ev: Evidence | None = None,
    grants: list[Grant] | None = None,
    now: datetime = NOW,
    budget: Any = OK,
) -> Evaluation:
    defn = defn or event_definition()
    return evaluate(
        defn,
        st or state(),
        ev or event(),
        [grant(defn)] if grants is None else grants,
        now,
        budget,
    )


def run_agent(
    ev: Evidence,
    *,
    st: WatcherState | None = None,
    grants: list[Grant] | None = None,
    now: datetime = NOW,
    evaluators: frozenset[str] = frozenset({EVALUATOR}),
) -> Evaluation:
    defn = agent_definition()
    return evaluate(
        defn,
        st or state(activated_at=NOW - timedelta(minutes=30)),
        ev,
        [grant(defn)] if grants is None else grants,
        now,
        OK,
        evaluators=evaluators,
    )


class CountingBudget:
    def __init__(self, verdict: BudgetVerdict = BudgetVerdict.OK) -> None:
        self.calls = 0
        self.verdict = verdict

    def __call__(self, _evidence: Evidence) -> BudgetVerdict:
        self.calls += 1
        return self.verdict


# --- every mode -------------------------------------------------------------------------


def test_true_condition_creates_one_outbox_entry_keyed_by_trigger() -> None:
    result = run_event()
    assert (result.outcome, result.reason) == (Outcome.SATISFIED, Reason.CONDITION_TRUE)
    assert result.outbox is not None
    expected = delivery_key(
        tenant_id=TENANT,
        user_id=USER,
        watcher_id="release-build-failed",
        watcher_version=1,
        source_id="ci.pipeline",
        trigger=EventTrigger("build.finished", "b-981"),
    )
    assert result.outbox.delivery_key == expected == result.receipt.delivery_key
    assert result.close is None
    assert result.next_state.status is WatcherStatus.ACTIVE


def test_outbox_entry_carries_everything_delivery_needs() -> None:
    entry = run_event().outbox
    assert entry is not None
    assert (entry.verb, entry.target, entry.purpose) == ("notify", "ops-hook", "ops.alert")
    assert entry.trigger == {"kind": "event", "event_type": "build.finished", "event_id": "b-981"}
    assert entry.due_at == NOW and entry.created_at == NOW
    assert entry.retry.max_attempts == 8
    assert entry.delivery_retention == timedelta(days=30)
    assert entry.evidence_digest == event().digest()


def test_false_condition_is_pending_and_advances_checkpoint() -> None:
    result = run_event(ev=event({"status": "passed"}))
    assert (result.outcome, result.reason) == (Outcome.PENDING, Reason.CONDITION_FALSE)
    assert result.outbox is None
    assert result.next_state.checkpoint is not None
    assert result.next_state.checkpoint.position == "vigil.events-0-17"


def test_receipt_keeps_only_allowlisted_leaves() -> None:
    result = run_event()
    assert result.receipt.payload == {"status": "failed"}


def test_same_trigger_applied_twice_yields_no_second_outbox_entry() -> None:
    first = run_event()
    again = run_event(st=first.next_state, ev=event(envelope_id="env-2", cursor="982"))
    assert again.outcome is Outcome.SATISFIED
    assert again.outbox is None
    assert "already applied" in again.receipt.note


def test_new_trigger_after_satisfied_creates_another_entry_in_every_mode() -> None:
    first = run_event()
    second = run_event(st=first.next_state, ev=event(event_id="b-982"))
    assert second.outbox is not None
    assert first.outbox is not None
    assert second.outbox.delivery_key != first.outbox.delivery_key


def test_definition_without_version_is_refused() -> None:
    defn = WatcherDefinition.from_json(
        event_definition().to_json() | {"version": None}, tenant_id=TENANT, user_id=USER
    )
    with pytest.raises(DefinitionError):
        evaluate(defn, state(), event(), [grant(event_definition())], NOW, OK)


# --- lifecycle gates ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "status",
    [WatcherStatus.PAUSED, WatcherStatus.PROPOSED, WatcherStatus.CANCELLED],
)
def test_inactive_watcher_is_not_evaluated(status: WatcherStatus) -> None:
    budget = CountingBudget()
    result = run_event(st=state(status), budget=budget)
    assert (result.outcome, result.reason) == (Outcome.NONE, Reason.NOT_ACTIVE)
    assert result.outbox is None and budget.calls == 0
    assert result.receipt.payload is None
    assert result.next_state.checkpoint is not None  # not_active advances


def test_event_after_expiry_expires_and_closes() -> None:
    defn = event_definition(expires_at="2026-11-29T11:59:59Z")
    result = run_event(defn=defn)
    assert (result.outcome, result.reason) == (Outcome.NONE, Reason.EXPIRED)
    assert result.close is CloseReason.EXPIRED
    assert result.next_state.status is WatcherStatus.EXPIRED
    assert result.outbox is None


def test_paused_watcher_expires_at_its_deadline() -> None:
    defn = event_definition(expires_at="2026-11-29T12:00:00Z")
    result = run_event(defn=defn, st=state(WatcherStatus.PAUSED))
    assert result.reason is Reason.EXPIRED
    assert result.next_state.status is WatcherStatus.EXPIRED


def test_once_watch_satisfied_exactly_at_deadline_notifies() -> None:
    deadline = NOW
    st = state(activated_at=deadline - timedelta(hours=1))
    result = run_agent(poll({"status": "succeeded"}, deadline), st=st, now=deadline)
    assert result.outcome is Outcome.SATISFIED
    assert result.outbox is not None
    assert result.close is CloseReason.SATISFIED


def test_once_watch_pending_at_deadline_closes_expired() -> None:
    st = state(activated_at=NOW - timedelta(hours=1))
    result = run_agent(poll({"status": "running"}, NOW), st=st, now=NOW + timedelta(seconds=2))
    assert result.outcome is Outcome.PENDING
    assert result.close is CloseReason.EXPIRED
    assert result.next_state.status is WatcherStatus.EXPIRED


def test_tick_after_deadline_is_not_evaluated() -> None:
    st = state(activated_at=NOW - timedelta(hours=1))
    later = NOW + timedelta(minutes=1)
    result = run_agent(poll({"status": "succeeded"}, later), st=st, now=later)
    assert result.reason is Reason.EXPIRED
    assert result.outbox is None


# --- authorization -----------------------------------------------------------------------


def test_denied_every_watcher_keeps_state_and_checkpoint() -> None:
    before = state()
    budget = CountingBudget()
    result = run_event(st=before, grants=[], budget=budget)
    assert (result.outcome, result.reason) == (Outcome.NONE, Reason.AUTHORIZATION_DENIED)
    assert result.next_state == before
    assert result.close is None and budget.calls == 0
    assert result.receipt.authorized is False
    assert "replay" in result.receipt.note
    assert result.receipt.payload is None


def test_expired_grant_denies() -> None:
    defn = event_definition()
    old = grant(defn, until=NOW - timedelta(seconds=1))
    result = run_event(grants=[old])
    assert result.reason is Reason.AUTHORIZATION_DENIED
    assert "expired" in result.receipt.authorization


def test_denied_once_watch_is_cancelled_access_revoked_without_advancing() -> None:
    st = state(activated_at=NOW - timedelta(minutes=10))
    result = run_agent(poll({"status": "succeeded"}), st=st, grants=[])
    assert result.reason is Reason.AUTHORIZATION_DENIED
    assert result.close is CloseReason.ACCESS_REVOKED
    assert result.next_state.status is WatcherStatus.CANCELLED
    assert result.next_state.checkpoint is None
    assert result.outbox is None


def test_polling_grant_without_the_tool_denies() -> None:
    defn = agent_definition()
    result = run_agent(poll({"status": "succeeded"}), grants=[grant(defn, tools=frozenset())])
    assert result.reason is Reason.AUTHORIZATION_DENIED


# --- evidence checks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [{"source_id": "ci.other"}, {"event_type": "build.started"}],
)
def test_evidence_from_another_source_is_source_mismatch(overrides: dict[str, Any]) -> None:
    result = run_event(ev=event(**overrides))
    assert (result.outcome, result.reason) == (Outcome.UNAVAILABLE, Reason.SOURCE_MISMATCH)
    assert result.next_state.checkpoint is not None


def test_tick_naming_another_watcher_is_source_mismatch() -> None:
    ev = poll({"status": "succeeded"}, watcher_key=(TENANT, USER, "other"))
    assert run_agent(ev).reason is Reason.SOURCE_MISMATCH


def test_event_older_than_max_age_is_stale_and_not_charged() -> None:
    budget = CountingBudget()
    result = run_event(ev=event(observed_at=NOW - timedelta(minutes=10, seconds=1)), budget=budget)
    assert (result.outcome, result.reason) == (Outcome.UNAVAILABLE, Reason.STALE)
    assert budget.calls == 0
    assert result.receipt.payload is None
    assert result.next_state.checkpoint is not None


def test_event_exactly_max_age_old_is_fresh() -> None:
    result = run_event(ev=event(observed_at=NOW - timedelta(minutes=10)))
    assert result.reason is Reason.CONDITION_TRUE


def test_event_beyond_future_skew_is_rejected() -> None:
    result = run_event(ev=event(observed_at=NOW + timedelta(seconds=31)))
    assert result.reason is Reason.FUTURE_SKEW
    assert run_event(ev=event(observed_at=NOW + timedelta(seconds=30))).outbox is not None


def test_exhausted_budget_keeps_no_payload_and_advances() -> None:
    result = run_event(budget=recorded_budget(BudgetVerdict.EXHAUSTED))
    assert (result.outcome, result.reason) == (Outcome.UNAVAILABLE, Reason.BUDGET_EXHAUSTED)
    assert result.receipt.payload is None and result.outbox is None
    assert result.receipt.budget is BudgetVerdict.EXHAUSTED
    assert result.next_state.checkpoint is not None


def test_unreachable_budget_store_defers_instead_of_evaluating() -> None:
    with pytest.raises(BudgetStoreError):
        run_event(budget=recorded_budget(BudgetVerdict.UNAVAILABLE))


def test_budget_is_consulted_once_for_fresh_authorized_evidence() -> None:
    budget = CountingBudget()
    run_event(budget=budget)
    assert budget.calls == 1


def test_missing_pinned_evaluator_is_unavailable() -> None:
    result = run_agent(poll({"status": "succeeded"}), evaluators=frozenset({"other@v1"}))
    assert (result.outcome, result.reason) == (Outcome.UNAVAILABLE, Reason.EVALUATOR_MISSING)
    assert result.close is None


def test_tool_error_is_unavailable_with_its_code() -> None:
    result = run_agent(poll({}, tool_error=ErrorCode.TIMEOUT))
    assert (result.outcome, result.reason) == (Outcome.UNAVAILABLE, Reason.TOOL_ERROR)
    assert result.receipt.tool_error is ErrorCode.TIMEOUT


# --- once mode -----------------------------------------------------------------------------


def test_once_watch_satisfied_closes_with_one_intent() -> None:
    result = run_agent(poll({"status": "succeeded"}))
    assert result.outcome is Outcome.SATISFIED
    assert result.close is CloseReason.SATISFIED
    assert result.next_state.status is WatcherStatus.SATISFIED
    assert result.outbox is not None and result.outbox.wake_session
    after = run_agent(
        poll({"status": "succeeded"}, NOW + timedelta(minutes=5)),
        st=result.next_state,
        now=NOW + timedelta(minutes=5),
    )
    assert after.reason is Reason.NOT_ACTIVE and after.outbox is None


def test_terminal_condition_closes_without_success_signal() -> None:
    result = run_agent(poll({"status": "failed"}))
    assert (result.outcome, result.reason) == (
        Outcome.TERMINAL_UNSATISFIED,
        Reason.TERMINAL_CONDITION,
    )
    assert result.outbox is None
    assert result.next_state.status is WatcherStatus.TERMINAL_UNSATISFIED


def test_once_watch_pending_stays_active() -> None:
    result = run_agent(poll({"status": "running"}))
    assert result.outcome is Outcome.PENDING
    assert result.close is None and result.next_state.status is WatcherStatus.ACTIVE


def test_one_shot_schedule_fires_once_and_closes() -> None:
    defn = schedule_definition()
    ev = Evidence(
        source_kind=EvidenceKind.SCHEDULE,
        source_id="schedule:me",
        observed_at=NOW + timedelta(hours=2),
        scheduled_at=NOW,
        late=True,
        watcher_key=(TENANT, USER, "schedule:me:standup"),
    )
    later = NOW + timedelta(hours=2)
    result = evaluate(defn, state(), ev, [grant(defn)], later, OK)
    assert result.outbox is not None
    assert result.outbox.late and result.outbox.due_at == NOW
    assert (result.outbox.verb, result.outbox.text) == ("send", "standup")
    assert result.outbox.schedule_name == "standup"
    assert result.close is CloseReason.SATISFIED


# --- evidence and state --------------------------------------------------------------------


@pytest.mark.parametrize("case", VECTORS["evidence_digest_v1"])
def test_evidence_digest_reproduces_the_shared_vector(case: dict[str, Any]) -> None:
    raw = case["evidence"]
    ev = Evidence(
        source_kind=EvidenceKind(raw["source_kind"]),
        source_id=raw["source_id"],
        event_type=raw["event_type"],
        event_id=raw["event_id"],
        envelope_id=raw["envelope_id"],
        cursor=raw["cursor"],
        observed_at=datetime.fromisoformat(raw["observed_at"]),
        payload=raw["payload"],
    )
    assert ev.digest_input() == raw
    assert ev.digest() == case["digest"]


def test_trigger_ignores_envelope_cursor_observation_and_payload() -> None:
    a = event()
    b = event({"status": "other"}, NOW - timedelta(minutes=1), envelope_id="e2", cursor="9")
    assert a.trigger() == b.trigger()
    assert a.digest() != b.digest()


def test_tick_without_scheduled_instant_is_refused() -> None:
    with pytest.raises(DefinitionError):
        Evidence(source_kind=EvidenceKind.POLL, source_id="s", observed_at=NOW)


def test_applied_trigger_memory_is_bounded() -> None:
    st = state()
    for i in range(RECENT_TRIGGERS + 5):
        st = st.replace(recent_triggers=st.remember(f"k{i}"))
    assert len(st.recent_triggers) == RECENT_TRIGGERS
    assert st.applied(f"k{RECENT_TRIGGERS + 4}") and not st.applied("k0")


def test_outbox_entry_freezes_quiet_hours_budgets_and_retry_from_the_definition() -> None:
    defn = event_definition(
        delivery={
            "target": "ops-hook",
            "verb": "notify",
            "quiet_hours": {"start": "22:00", "end": "07:00", "timezone": "Europe/Berlin"},
        },
        budgets={"window": "1h", "deliveries": 20},
        retry={"max_attempts": 3, "base": "10s", "cap": "5m"},
    )
    entry = run_event(defn=defn).outbox
    assert entry is not None
    assert entry.quiet_hours is not None and entry.quiet_hours.timezone == "Europe/Berlin"
    assert entry.budgets is not None and entry.budgets.deliveries == 20
    assert (entry.retry.max_attempts, entry.retry.base) == (3, timedelta(seconds=10))


def test_evaluations_are_counted_only_when_something_was_judged() -> None:
    judged = run_event(ev=event({"status": "passed"}))
    skipped = run_event(st=state(WatcherStatus.PAUSED))
    assert judged.next_state.evaluations == 1
    assert skipped.next_state.evaluations == 0
    assert judged.next_state.revision == 1
