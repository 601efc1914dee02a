"""mode: change: one notification per false→true transition, quiet while true, re-armed by false,
``resolved`` per true→false when asked, ``repeat_after`` for a condition that stays true; keys
per transition's trigger; replay reproduces every decision, from the start or mid-way."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rules.authz import Action, Grant
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.change import ChangePolicy, Notice, change_step, recorded_truth
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError
from pipeline.rules.evaluation import evaluate, recorded_budget
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.keys import InstantTrigger, delivery_key
from pipeline.rules.lifecycle import CloseReason, WatcherStatus
from pipeline.rules.outcomes import ErrorCode, Outcome, Reason
from pipeline.rules.receipts import Receipt
from pipeline.rules.replay import replay
from pipeline.rules.watcher_state import WatcherState
from tests.unit.rules.test_replay import T0, TENANT, USER, WATCHER, Recorder, definition, event

pytestmark = pytest.mark.unit

TOOL, SOURCE = "http.json@v1", "status.page"
POLL_GRANT = Grant(
    grant_id="g-poll",
    tenant_id=TENANT,
    user_id=USER,
    purpose="ops.alert",
    sources=frozenset({SOURCE}),
    tools=frozenset({"status-page"}),
    actions=frozenset({Action.EVALUATE}),
    until=datetime(2030, 1, 1, tzinfo=UTC),
)


def site_down(**change: Any) -> WatcherDefinition:
    """A polling watcher in change mode: "tell me when the site is down"."""
    body: dict[str, Any] = {
        "watcher_id": WATCHER,
        "purpose": "ops.alert",
        "mode": "change",
        "source": {
            "kind": "polling",
            "source_id": SOURCE,
            "tool": TOOL,
            "tool_ref": "status-page",
            "cron": "* * * * *",
            "timezone": "UTC",
            "missed": "latest",
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "down"]},
        "delivery": {"target": "ops-hook", "verb": "notify"},
        "expires_at": "2030-01-01T00:00:00Z",
        "privacy": {"retain_paths": ["status"]},
    }
    if change:
        body["change"] = change
    return WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER).with_version(1)


def tick(minute: int, status: str | None) -> Evidence:
    """The poll at ``T0 + minute``; ``None``: the tool failed (no truth claim)."""
    at = T0 + timedelta(minutes=minute)
    return Evidence(
        source_kind=EvidenceKind.POLL,
        source_id=SOURCE,
        observed_at=at,
        scheduled_at=at,
        payload={} if status is None else {"status": status},
        watcher_key=(TENANT, USER, WATCHER),
        tool_error=ErrorCode.TIMEOUT if status is None else None,
        position=f"vigil.ticks:0:{minute}",
    )


def key_at(minute: int) -> str:
    return delivery_key(
        tenant_id=TENANT,
        user_id=USER,
        watcher_id=WATCHER,
        watcher_version=1,
        source_id=SOURCE,
        trigger=InstantTrigger("poll", T0 + timedelta(minutes=minute)),
    )


def polled(defn: WatcherDefinition, statuses: Sequence[str | None]) -> Recorder:
    """Each status polled one minute after the other, decided as the evaluator does."""
    recorder = Recorder(defn, evaluators=frozenset({TOOL}))
    for minute, status in enumerate(statuses):
        recorder.run(tick(minute, status), grants=(POLL_GRANT,))
    return recorder


def edges(truths: list[bool]) -> tuple[list[int], list[int]]:
    """Indexes where the truth rises (false or unknown → true) and falls (true → false)."""
    rises = [i for i, t in enumerate(truths) if t and (i == 0 or not truths[i - 1])]
    falls = [i for i, t in enumerate(truths) if not t and i > 0 and truths[i - 1]]
    return rises, falls


# --- the transition alone ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(truths=st.lists(st.booleans(), max_size=40), resolved=st.booleans())
def test_one_firing_per_rise_and_resolved_per_fall_only_when_asked(
    truths: list[bool], resolved: bool
) -> None:
    policy = ChangePolicy(resolved=resolved)
    last: bool | None = None
    notified: datetime | None = None
    notices = []
    for minute, holds in enumerate(truths):
        step = change_step(policy, last, notified, holds, T0 + timedelta(minutes=minute))
        last, notified = step.holds, step.notified_at
        notices.append(step.notice)
    rises, falls = edges(truths)
    assert [i for i, n in enumerate(notices) if n is Notice.FIRING] == rises
    cleared = Notice.RESOLVED if resolved else Notice.CLEARED
    assert [i for i, n in enumerate(notices) if n is cleared] == falls
    assert all(n is Notice.QUIET for i, n in enumerate(notices) if i not in (*rises, *falls))
    assert [i for i, n in enumerate(notices) if n.sends] == sorted(
        rises + (falls if resolved else [])
    )


@settings(max_examples=300, deadline=None)
@given(
    truths=st.lists(st.booleans(), max_size=40),
    gaps=st.lists(st.integers(min_value=1, max_value=30), min_size=40, max_size=40),
    repeat=st.integers(min_value=1, max_value=60),
)
def test_repeat_after_reminds_a_still_true_condition_no_sooner_and_no_later(
    truths: list[bool], gaps: list[int], repeat: int
) -> None:
    policy = ChangePolicy(repeat_after=timedelta(minutes=repeat))
    last: bool | None = None
    notified: datetime | None = None
    at = T0
    for holds, gap in zip(truths, gaps, strict=False):
        at += timedelta(minutes=gap)
        step = change_step(policy, last, notified, holds, at)
        if holds and last:
            due = notified is not None and at - notified >= timedelta(minutes=repeat)
            assert step.notice is (Notice.REPEAT if due else Notice.QUIET)
        else:
            assert step.notice is not Notice.REPEAT
        if step.notice.sends and holds:
            assert step.notified_at == at
        else:
            assert step.notified_at == notified
        last, notified = step.holds, step.notified_at


# --- through evaluate(), with keys, receipts and replay -------------------------------------------

statuses = st.lists(st.sampled_from(["down", "up", None]), max_size=30)


@settings(max_examples=150, deadline=None)
@given(polls=statuses, resolved=st.booleans())
def test_a_flapping_poll_makes_one_entry_per_transition_keyed_by_its_poll(
    polls: list[str | None], resolved: bool
) -> None:
    recorder = polled(site_down(resolved=resolved), polls)
    judged = [(m, s == "down") for m, s in enumerate(polls) if s is not None]
    rises, falls = edges([t for _, t in judged])
    firing = [judged[i][0] for i in rises]
    clearing = [judged[i][0] for i in falls]
    entries = list(recorder.outbox.values())
    assert all(e is not None for e in entries)
    by_outcome = {
        o: sorted(e.delivery_key for e in entries if e is not None and e.outcome is o)
        for o in (Outcome.SATISFIED, Outcome.RESOLVED)
    }
    assert by_outcome[Outcome.SATISFIED] == sorted(key_at(m) for m in firing)
    assert by_outcome[Outcome.RESOLVED] == sorted(key_at(m) for m in clearing if resolved)
    resolved_receipts = [r for r in recorder.receipts if r.outcome is Outcome.RESOLVED]
    assert [r.reason for r in resolved_receipts] == [Reason.CONDITION_FALSE] * len(clearing)


@settings(max_examples=100, deadline=None)
@given(polls=statuses, resolved=st.booleans(), repeat=st.sampled_from([None, "1m", "3m"]))
def test_replay_of_a_change_watcher_reproduces_every_decision_from_any_point(
    polls: list[str | None], resolved: bool, repeat: str | None
) -> None:
    options: dict[str, Any] = {"resolved": resolved}
    if repeat is not None:
        options["repeat_after"] = repeat
    recorder = polled(site_down(**options), polls)
    assert replay(recorder.history()).differences == []
    for start in range(len(polls)):
        later = {f"vigil.ticks:0:{m}" for m in range(start, len(polls))}
        report = replay(recorder.history(later))
        assert report.differences == [], start
        assert report.replayed == len(later)


def test_down_down_down_up_down_notifies_twice_and_resolves_once() -> None:
    recorder = polled(site_down(resolved=True), ["down", "down", "down", "up", "down"])
    notes = [r.note for r in recorder.receipts]
    assert notes == [
        "change: firing",
        "change: quiet",
        "change: quiet",
        "change: resolved",
        "change: firing",
    ]
    keys = [r.delivery_key for r in recorder.receipts]
    assert keys == [key_at(0), None, None, key_at(3), key_at(4)]
    assert [e.outcome for e in recorder.outbox.values() if e is not None] == [
        Outcome.SATISFIED,
        Outcome.RESOLVED,
        Outcome.SATISFIED,
    ]
    assert replay(recorder.history()).differences == []


def test_a_failed_poll_neither_clears_nor_re_arms() -> None:
    recorder = polled(site_down(resolved=True), ["down", None, "down", None, None, "up"])
    assert [r.delivery_key is not None for r in recorder.receipts] == [
        True,
        False,
        False,
        False,
        False,
        True,
    ]
    assert recorder.receipts[1].reason is Reason.TOOL_ERROR
    assert recorder.state.holds is False


def test_repeat_after_reminds_every_three_polls_while_down() -> None:
    recorder = polled(site_down(repeat_after="3m"), ["down"] * 7 + ["up", "down"])
    fired = [m for m, r in enumerate(recorder.receipts) if r.delivery_key is not None]
    assert fired == [0, 3, 6, 8]
    assert [recorder.receipts[m].note for m in fired] == [
        "change: firing",
        "change: repeat",
        "change: repeat",
        "change: firing",
    ]


def test_the_same_poll_seen_again_moves_nothing_and_sends_nothing() -> None:
    recorder = polled(site_down(resolved=True), ["down", "up"])
    before = recorder.state
    recorder.run(tick(0, "down"), grants=(POLL_GRANT,))  # the first poll's tick again
    assert recorder.receipts[-1].delivery_key is None
    assert (recorder.state.holds, recorder.state.notified_at) == (before.holds, before.notified_at)
    recorder.run(tick(2, "down"), grants=(POLL_GRANT,))
    assert recorder.receipts[-1].delivery_key == key_at(2), "still re-armed by the up"


def test_an_event_watcher_in_change_mode_notifies_on_the_first_failure_of_a_run() -> None:
    recorder = Recorder(definition(mode="change"))
    for n, status in enumerate(["failed", "failed", "passed", "failed"]):
        recorder.run(event(n, status))
    assert [r.delivery_key is not None for r in recorder.receipts] == [True, False, False, True]
    assert [r.outcome for r in recorder.receipts][2] is Outcome.RESOLVED
    assert replay(recorder.history()).differences == []


def test_a_denied_poll_judges_nothing_and_says_where_the_watcher_goes_on() -> None:
    recorder = polled(site_down(), ["down"])
    recorder.run(tick(1, "up"), grants=())
    denied = recorder.receipts[-1]
    assert denied.reason is Reason.AUTHORIZATION_DENIED
    assert denied.note.endswith("goes on from the last known truth")
    recorder.run(tick(2, "down"), grants=(POLL_GRANT,))
    assert recorder.receipts[-1].delivery_key is None, "still down: the denied up judged nothing"


def test_the_final_poll_at_the_deadline_clears_and_expires_with_both_noted() -> None:
    defn = site_down()
    deadline = defn.expires_at
    assert deadline is not None
    last = dataclasses.replace(tick(0, "up"), observed_at=deadline, scheduled_at=deadline)
    state = WatcherState(version=1, status=WatcherStatus.ACTIVE, activated_at=T0, holds=True)
    result = evaluate(
        defn,
        state,
        last,
        (POLL_GRANT.model_copy(update={"until": deadline + timedelta(days=1)}),),
        deadline + timedelta(seconds=1),
        recorded_budget(BudgetVerdict.OK),
        evaluators=frozenset({TOOL}),
    )
    assert (result.outcome, result.close) == (Outcome.RESOLVED, CloseReason.EXPIRED)
    assert result.receipt.note == "final evaluation at the deadline; change: cleared"
    assert result.next_state.holds is False and result.outbox is None


@settings(max_examples=200, deadline=None)
@given(
    trigger=st.dictionaries(st.sampled_from(["kind", "scheduled_at", "event_id"]), st.text()),
    reason=st.sampled_from(list(Reason)),
    keyed=st.booleans(),
)
def test_replay_seeds_from_any_recorded_receipt_without_raising(
    trigger: dict[str, str], reason: Reason, keyed: bool
) -> None:
    receipt = Receipt(
        tenant_id=TENANT,
        user_id=USER,
        watcher_id=WATCHER,
        watcher_version=1,
        evaluated_at=T0,
        evidence_digest="0" * 64,
        trigger=trigger,
        trigger_key="1" * 64,
        observed_at=T0,
        outcome=Outcome.SATISFIED,
        reason=reason,
        authorized=True,
        delivery_key="1" * 64 if keyed else None,
    )
    seeded = recorded_truth(WatcherState(version=1, status=WatcherStatus.ACTIVE), receipt)
    judged = reason in (Reason.CONDITION_TRUE, Reason.CONDITION_FALSE)
    assert seeded.holds is (None if not judged else reason is Reason.CONDITION_TRUE)
    notified = keyed and reason is Reason.CONDITION_TRUE
    assert (seeded.notified_at is not None) is notified


# --- the definition -----------------------------------------------------------------------------


def test_change_options_round_trip_and_need_their_mode() -> None:
    defn = site_down(resolved=True, repeat_after="4h")
    assert defn.to_json()["change"] == {"resolved": True, "repeat_after": "4h"}
    assert defn.with_version(2).change == defn.change
    body = {**defn.to_json(), "mode": "every"}
    with pytest.raises(DefinitionError) as refused:
        WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER)
    assert refused.value.field == "change"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"repeat_after": "30s"}, "change.repeat_after"),
        ({"repeat_after": "soon"}, "change.repeat_after"),
        ({"resolved": "yes"}, "change.resolved"),
        ({"again": True}, "change.again"),
    ],
)
def test_bad_change_options_are_refused_naming_the_field(
    change: dict[str, Any], field: str
) -> None:
    body = {**site_down().to_json(), "change": change}
    with pytest.raises(DefinitionError) as refused:
        WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER)
    assert refused.value.field == field


def test_a_schedule_has_no_change_mode() -> None:
    body = {
        "watcher_id": "schedule:me:standup",
        "purpose": "schedule.chat",
        "mode": "change",
        "source": {"kind": "schedule", "cron": "0 9 * * *", "timezone": "UTC"},
        "delivery": {"target": "me", "verb": "send", "text": "standup"},
    }
    with pytest.raises(DefinitionError) as refused:
        WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER)
    assert refused.value.field == "mode"
