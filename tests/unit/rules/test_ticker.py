"""plan_watcher(): due ticks, missed-run policies, schedules, deadlines and the Agenda."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.instants import parse_instant
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.ticker import DueTick, TickerMemory, TickKind, WatcherPlan, plan_watcher
from producers.ticker.agenda import Agenda
from tests.vectors import VECTORS

pytestmark = pytest.mark.unit

ACTIVE, PAUSED = WatcherStatus.ACTIVE, WatcherStatus.PAUSED
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def at(text: str) -> datetime:
    return parse_instant(text)


def polling(missed: Any = "latest", cron: str = "* * * * *", **overrides: Any) -> WatcherDefinition:
    body: dict[str, Any] = {
        "watcher_id": "status-page",
        "purpose": "ops.alert",
        "source": {
            "kind": "polling",
            "source_id": "status.page",
            "tool": "http.json@v1",
            "tool_ref": "status-page",
            "cron": cron,
            "timezone": "UTC",
            "missed": missed,
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "down"]},
        "delivery": {"target": "ops-hook"},
        "expires_at": "2027-06-01T00:00:00Z",
    }
    body.update(overrides)
    return WatcherDefinition.from_json(body, tenant_id="acme", user_id="u-1").with_version(1)


def agent_watch(window: str = "1h", cadence: str = "5m") -> WatcherDefinition:
    body: dict[str, Any] = {
        "watcher_id": "run-r-81-done",
        "purpose": "agent.watch",
        "mode": "once",
        "source": {
            "kind": "polling",
            "source_id": "run:r-81",
            "tool": "workflow.run.status@v1",
            "target": "r-81",
            "cadence": cadence,
            "max_age": "2m",
        },
        "condition": {"eq": ["status", "succeeded"]},
        "terminal_condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "in-app"},
        "window": window,
        "session_id": "s-1",
    }
    return WatcherDefinition.from_json(body, tenant_id="acme", user_id="u-1").with_version(1)


def schedule(source: dict[str, Any]) -> WatcherDefinition:
    body = {
        "watcher_id": "schedule:me:standup",
        "purpose": "schedule.chat",
        "source": {"kind": "schedule", **source},
        "delivery": {"target": "me", "verb": "send", "text": "standup"},
    }
    return WatcherDefinition.from_json(body, tenant_id="acme", user_id="u-1").with_version(1)


def memory(through: datetime, **overrides: Any) -> TickerMemory:
    return TickerMemory(version=1, status=ACTIVE, enumerated_through=through, **overrides)


def instants(plan: WatcherPlan, kind: TickKind = TickKind.POLL) -> list[datetime]:
    return [tick.scheduled_at for tick in plan.ticks if tick.kind is kind]


def run_steps(
    definition: WatcherDefinition,
    start: datetime,
    end: datetime,
    step: timedelta,
    activated_at: datetime | None = None,
) -> list[DueTick]:
    """Plan every ``step`` from ``start`` to ``end``, carrying memory; all ticks in order."""
    mem: TickerMemory | None = None
    out: list[DueTick] = []
    now = start
    while now <= end:
        plan = plan_watcher(definition, ACTIVE, activated_at or start, mem, now)
        out.extend(plan.ticks)
        mem = plan.memory
        now += step
    return out


# --- missed runs ------------------------------------------------------------------------


@pytest.mark.parametrize("case", VECTORS["missed_run_policies"])
@pytest.mark.parametrize(
    ("policy", "expected_field"),
    [("skip", "skip"), ("latest", "latest"), ({"bounded": 3}, "bounded_3")],
)
def test_plan_after_downtime_follows_missed_policy_vectors(
    case: dict[str, Any], policy: Any, expected_field: str
) -> None:
    definition = polling(missed=policy, cron=case["cron"])
    plan = plan_watcher(
        definition, ACTIVE, None, memory(at(case["last_enumerated"])), at(case["now"])
    )
    assert instants(plan) == [at(t) for t in case[expected_field]]
    assert plan.missed == 5
    assert plan.next_check == at(case["next_future"])


def test_plan_on_time_instant_fires_once_across_repeated_steps() -> None:
    definition = polling()
    first = plan_watcher(definition, ACTIVE, None, memory(T0), T0 + timedelta(minutes=1, seconds=2))
    assert instants(first) == [T0 + timedelta(minutes=1)]
    assert first.persist
    again = plan_watcher(
        definition, ACTIVE, None, first.memory, T0 + timedelta(minutes=1, seconds=3)
    )
    assert again.ticks == ()
    assert not again.persist


def test_plan_skip_after_downtime_persists_nothing_and_fires_next_instant() -> None:
    definition = polling(missed="skip")
    down = plan_watcher(definition, ACTIVE, None, memory(T0), T0 + timedelta(minutes=5, seconds=30))
    assert down.ticks == () and down.dropped == 5 and down.persist
    nxt = plan_watcher(definition, ACTIVE, None, down.memory, T0 + timedelta(minutes=6))
    assert instants(nxt) == [T0 + timedelta(minutes=6)]


def test_plan_backfill_never_reaches_past_delivery_retention() -> None:
    definition = polling(
        missed={"bounded": 100},
        privacy={"delivery_retention": "1h"},
        expires_at="2027-06-01T00:00:00Z",
    )
    now = T0 + timedelta(hours=10, seconds=30)
    plan = plan_watcher(definition, ACTIVE, None, memory(T0), now)
    fired = instants(plan)
    assert fired and min(fired) >= now - timedelta(hours=1)
    assert len(fired) == 60


def test_plan_new_watcher_starts_at_activation_not_epoch() -> None:
    definition = polling(missed={"bounded": 100})
    activated = T0 + timedelta(seconds=30)
    plan = plan_watcher(definition, ACTIVE, activated, None, T0 + timedelta(minutes=3, seconds=1))
    assert instants(plan) == [T0 + timedelta(minutes=m) for m in (1, 2, 3)]
    assert plan.persist


def test_plan_closed_watcher_emits_nothing_and_is_never_due() -> None:
    plan = plan_watcher(polling(), WatcherStatus.CANCELLED, T0, memory(T0), T0 + timedelta(hours=1))
    assert plan.ticks == () and plan.next_check is None


# --- pause and expiry ---------------------------------------------------------------------


def test_plan_paused_watcher_skips_instants_and_resume_backfills_none() -> None:
    definition = polling(missed={"bounded": 100})
    paused = plan_watcher(definition, PAUSED, T0, memory(T0), T0 + timedelta(minutes=30))
    assert paused.ticks == () and paused.persist
    resumed = plan_watcher(
        definition, ACTIVE, T0, paused.memory, T0 + timedelta(minutes=40, seconds=1)
    )
    assert resumed.ticks == ()
    later = plan_watcher(
        definition, ACTIVE, T0, resumed.memory, T0 + timedelta(minutes=41, seconds=1)
    )
    assert instants(later) == [T0 + timedelta(minutes=41)]


def test_plan_paused_watcher_still_gets_one_expiry_tick() -> None:
    definition = polling(expires_at="2026-11-29T11:00:00Z")
    deadline = at("2026-11-29T11:00:00Z")
    before = plan_watcher(definition, PAUSED, T0, memory(T0), deadline - timedelta(seconds=1))
    assert before.ticks == () and before.next_check == deadline
    plan = plan_watcher(definition, PAUSED, T0, before.memory, deadline + timedelta(hours=2))
    assert plan.ticks == (DueTick(TickKind.EXPIRY, deadline),)
    again = plan_watcher(definition, PAUSED, T0, plan.memory, deadline + timedelta(hours=3))
    assert again.ticks == () and again.next_check is None


def test_plan_every_watcher_enumerates_nothing_past_its_deadline() -> None:
    definition = polling(missed={"bounded": 100}, expires_at="2026-11-29T10:03:00Z")
    plan = plan_watcher(definition, ACTIVE, T0, memory(T0), T0 + timedelta(minutes=10))
    assert max(instants(plan)) == T0 + timedelta(minutes=3)
    assert [t.kind for t in plan.ticks][-1] is TickKind.EXPIRY
    assert not any(t.final for t in plan.ticks)


def test_once_watch_gets_final_poll_at_an_off_cadence_deadline_then_expiry() -> None:
    activated = T0 + timedelta(seconds=17)
    ticks = run_steps(
        agent_watch(),
        T0 + timedelta(seconds=17),
        T0 + timedelta(hours=1, minutes=2),
        timedelta(seconds=1),
        activated,
    )
    deadline = activated + timedelta(hours=1)
    polls = [t.scheduled_at for t in ticks if t.kind is TickKind.POLL]
    assert polls == [T0 + timedelta(minutes=m) for m in range(5, 60, 5)] + [
        T0 + timedelta(hours=1),
        deadline,
    ]
    assert ticks[-2] == DueTick(TickKind.POLL, deadline, final=True)
    assert ticks[-1] == DueTick(TickKind.EXPIRY, deadline)


def test_once_watch_whose_deadline_is_a_cadence_instant_polls_it_once() -> None:
    ticks = run_steps(
        agent_watch(window="30m"), T0, T0 + timedelta(minutes=31), timedelta(seconds=1)
    )
    polls = [t.scheduled_at for t in ticks if t.kind is TickKind.POLL]
    assert polls == [T0 + timedelta(minutes=m) for m in range(5, 31, 5)]
    assert ticks[-1] == DueTick(TickKind.EXPIRY, T0 + timedelta(minutes=30))


def test_once_watch_down_past_its_deadline_still_gets_the_final_poll() -> None:
    definition = agent_watch(window="30m")
    plan = plan_watcher(
        definition, ACTIVE, T0, memory(T0 + timedelta(minutes=10)), T0 + timedelta(hours=3)
    )
    deadline = T0 + timedelta(minutes=30)
    assert plan.ticks[-2:] == (DueTick(TickKind.POLL, deadline), DueTick(TickKind.EXPIRY, deadline))
    assert instants(plan) == [deadline]  # latest: the missed deadline instant is the final poll


# --- schedules ---------------------------------------------------------------------------


def test_one_shot_fires_once_on_time_and_not_before() -> None:
    definition = schedule({"at": "2026-11-29T12:00:00Z"})
    due = at("2026-11-29T12:00:00Z")
    early = plan_watcher(definition, ACTIVE, T0, None, due - timedelta(seconds=1))
    assert early.ticks == () and early.next_check == due
    plan = plan_watcher(definition, ACTIVE, T0, early.memory, due + timedelta(seconds=1))
    assert plan.ticks == (DueTick(TickKind.SCHEDULE, due, late=False),)
    again = plan_watcher(definition, ACTIVE, T0, plan.memory, due + timedelta(days=1))
    assert again.ticks == () and again.next_check is None


def test_one_shot_missed_during_downtime_fires_late_with_its_due_instant() -> None:
    definition = schedule({"at": "2026-11-29T12:00:00Z"})
    plan = plan_watcher(definition, ACTIVE, T0, memory(T0), at("2026-12-09T08:00:00Z"))
    assert plan.ticks == (DueTick(TickKind.SCHEDULE, at("2026-11-29T12:00:00Z"), late=True),)


def test_cron_schedule_skips_missed_ticks_them_late_and_resumes_at_next_occurrence() -> None:
    definition = schedule({"cron": "0 8 * * *", "timezone": "Europe/Berlin"})
    plan = plan_watcher(definition, ACTIVE, T0, memory(T0), at("2026-12-03T12:00:00Z"))
    missed = [at(f"2026-{d}T07:00:00Z") for d in ("11-30", "12-01", "12-02", "12-03")]
    # Each missed occurrence is ticked late, to be recorded as missed: none fires.
    assert plan.ticks == tuple(DueTick(TickKind.SCHEDULE, m, late=True) for m in missed)
    assert (plan.missed, plan.dropped, plan.policy) == (4, 4, "skip")
    assert plan.next_check == at("2026-12-04T07:00:00Z")
    again = plan_watcher(definition, ACTIVE, T0, plan.memory, at("2026-12-04T07:00:01Z"))
    assert again.ticks == (DueTick(TickKind.SCHEDULE, at("2026-12-04T07:00:00Z")),)


def test_cron_schedule_ticks_at_most_the_newest_hundred_missed_occurrences() -> None:
    definition = schedule({"cron": "* * * * *", "timezone": "UTC"})
    now = T0 + timedelta(hours=5)
    plan = plan_watcher(definition, ACTIVE, T0, memory(T0), now)
    late = [t.scheduled_at for t in plan.ticks if t.late]
    assert len(late) == 100 and late[-1] == now - timedelta(minutes=1)
    assert [t.scheduled_at for t in plan.ticks if not t.late] == [now]
    assert (plan.missed, plan.dropped) == (299, 299)


@pytest.mark.parametrize(
    ("cron", "start", "end", "expected"),
    [
        ("30 1 * * *", "2026-10-31T12:00:00Z", "2026-11-01T12:00:00Z", ["2026-11-01T05:30:00Z"]),
        ("30 2 * * *", "2026-03-07T12:00:00Z", "2026-03-08T12:00:00Z", ["2026-03-08T07:00:00Z"]),
    ],
)
def test_cron_schedule_across_dst_fires_once(
    cron: str, start: str, end: str, expected: list[str]
) -> None:
    definition = schedule({"cron": cron, "timezone": "America/New_York"})
    ticks = run_steps(definition, at(start), at(end), timedelta(seconds=30))
    assert [t.scheduled_at for t in ticks] == [at(e) for e in expected]
    assert all(t.kind is TickKind.SCHEDULE and not t.late for t in ticks)


# --- agenda ------------------------------------------------------------------------------


def test_agenda_pops_each_key_once_at_its_latest_time() -> None:
    agenda: Agenda[str] = Agenda()
    agenda.set("a", T0 + timedelta(minutes=1))
    agenda.set("b", T0 + timedelta(minutes=2))
    agenda.set("a", T0 + timedelta(minutes=3))
    agenda.set("c", T0)
    agenda.set("c", None)
    assert agenda.due(T0 + timedelta(minutes=2)) == ["b"]
    assert agenda.due(T0 + timedelta(minutes=3)) == ["a"]
    assert agenda.due(T0 + timedelta(days=1)) == []
    assert len(agenda) == 0


def test_plan_next_check_is_the_deadline_when_it_comes_before_the_next_instant() -> None:
    definition = polling(cron="0 8 * * *", expires_at="2026-11-29T12:00:00Z")
    other = polling(cron="0 8 * * *", expires_at="2026-12-29T12:00:00Z")
    plan = plan_watcher(definition, ACTIVE, T0, memory(T0), T0 + timedelta(seconds=30))
    later = plan_watcher(other, ACTIVE, T0, memory(T0), T0 + timedelta(seconds=30))
    assert plan.next_check == at("2026-11-29T12:00:00Z")
    assert later.next_check == at("2026-11-30T08:00:00Z")


def test_plan_new_version_continues_where_the_old_version_stopped() -> None:
    v2 = polling(missed={"bounded": 100}).with_version(2)
    old = memory(T0 + timedelta(minutes=3))
    plan = plan_watcher(v2, ACTIVE, T0, old, T0 + timedelta(minutes=4, seconds=1))
    assert instants(plan) == [T0 + timedelta(minutes=4)]
    assert plan.memory.version == 2 and plan.persist


def test_one_shot_whose_fire_a_pause_caught_fires_again_late_on_resume() -> None:
    """Its tick reached a paused watcher (``not_active``): still live, so it has not fired."""
    definition = schedule({"at": "2026-11-29T12:00:00Z"})
    due = at("2026-11-29T12:00:00Z")
    fired = plan_watcher(definition, ACTIVE, T0, memory(T0), due)
    assert fired.memory.one_shot_done
    paused = plan_watcher(definition, WatcherStatus.PAUSED, T0, fired.memory, due + timedelta(1))
    resumed = plan_watcher(definition, ACTIVE, T0, paused.memory, due + timedelta(2))
    assert resumed.ticks == (DueTick(TickKind.SCHEDULE, due, late=True),)
    assert resumed.memory.one_shot_done
