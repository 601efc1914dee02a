"""Cron schedules, DST slot rules, missed-run policies, one-shots, cadence (pipeline.rules.cron)."""

from __future__ import annotations

import heapq
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

from pipeline.rules.cron import (
    CronSchedule,
    MissedPolicy,
    OneShot,
    cadence_cron,
    fires_between,
    next_fire,
    one_shot_status,
    plan_due,
)
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import parse_instant
from tests.vectors import VECTORS

pytestmark = pytest.mark.unit

ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Europe/Dublin",
    "Pacific/Chatham",
    "America/Santiago",
]
SWEEP = [
    "30 1 * * *",
    "30 2 * * *",
    "0 2 * * *",
    "0 * * * *",
    "*/30 * * * *",
    "15 * * * *",
    "0 8 * * 1-5",
    "45 23 * * *",
    "0 0 1 * *",
]
START = datetime(2026, 1, 1, tzinfo=UTC)
END = datetime(2028, 1, 1, tzinfo=UTC)


def _z(text: str) -> datetime:
    return parse_instant(text)


def _cronsim(expr: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    fires = []
    for fire in CronSim(expr, start.astimezone(ZoneInfo(zone))):
        if fire > end:
            break
        fires.append(fire.astimezone(UTC))
    return fires


def _transition_days(zone: str) -> list[datetime]:
    """Midnights UTC of days in [START, END) on which ``zone`` changes its offset."""
    tz, days, day = ZoneInfo(zone), [], START
    while day < END:
        if day.astimezone(tz).utcoffset() != (day + timedelta(days=1)).astimezone(tz).utcoffset():
            days.append(day)
        day += timedelta(days=1)
    return days


@cache
def _cronsim_fires(expr: str, zone: str) -> tuple[datetime, ...]:
    """The reference: cronsim's fires in (START, END].

    cronsim walks ``*/30 * * * *`` minute by minute (about 4 s a zone), so away from offset
    changes it is read as the union of ``0 * * * *`` and ``30 * * * *`` (identical for a
    wildcard-hour job: its fires are the real instants whose wall time matches). Around each
    offset change (the day before to the day after) cronsim's own ``*/30`` answer is used:
    there its single-minute ``30 * * * *`` misses Lord Howe's repeated 01:30.
    """
    if expr != "*/30 * * * *":
        return tuple(_cronsim(expr, zone, START, END))
    fires = list(heapq.merge(_cronsim_fires("0 * * * *", zone), _cronsim_fires("30 * * * *", zone)))
    for day in _transition_days(zone):
        low, high = day - timedelta(days=1), day + timedelta(days=2)
        fires = [f for f in fires if not low < f <= high]
        fires += _cronsim(expr, zone, low, high)
    return tuple(sorted(fires))


@pytest.mark.parametrize("case", VECTORS["cron_slots"], ids=lambda c: f"{c['cron']}@{c['after']}")
def test_fires_between_reproduces_reference_vector(case: dict[str, Any]) -> None:
    sched = CronSchedule.parse(str(case["cron"]), str(case["timezone"]))
    fires = fires_between(sched, _z(str(case["after"])), _z(str(case["until"])))
    assert fires == [_z(f) for f in case["fires"]]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("expr", SWEEP)
def test_fires_between_matches_cronsim_over_2026_and_2027(expr: str, zone: str) -> None:
    ours = fires_between(CronSchedule.parse(expr, zone), START, END)
    assert ours == list(_cronsim_fires(expr, zone))


@pytest.mark.parametrize(
    "expr",
    [
        "0 0 L * *",
        "0 9 * * 5#2",
        "0 0 1,15 * 1",
        "0 0 */2 * 1",
        "0 8 * * mon-fri",
        "0 0 1 jan,jul *",
        "0 12 * * 0,7",
        "0 0 1-7 * 1",
    ],
)
def test_calendar_fields_match_cronsim_day_rules(expr: str) -> None:
    # Day-of-month OR day-of-week when both are restricted, AND when one starts with "*".
    ours = fires_between(CronSchedule.parse(expr, "Europe/Berlin"), START, END)
    assert ours == _cronsim(expr, "Europe/Berlin", START, END)


@pytest.mark.parametrize("zone", ZONES)
def test_fixed_hour_job_fires_once_every_day_including_transition_days(zone: str) -> None:
    fires = fires_between(CronSchedule.parse("30 1 * * *", zone), START, END)
    days = [f.astimezone(ZoneInfo(zone)).date() for f in fires]
    assert len(days) == len(set(days)) == 730


@pytest.mark.parametrize("zone", ZONES)
def test_hourly_job_keeps_real_time_rhythm_through_transitions(zone: str) -> None:
    # Whole-hour offsets keep exact 1 h spacing; Lord Howe's 30-minute and Chatham's :45 shifts
    # move the wall clock off the hour, so fires there are 30 or 60 (or 90) minutes apart.
    fires = fires_between(CronSchedule.parse("15 * * * *", zone), START, END)
    gaps = {b - a for a, b in pairwise(fires)}
    assert timedelta(hours=1) in gaps
    assert all(timedelta(minutes=30) <= g <= timedelta(minutes=90) for g in gaps)


def test_wildcard_job_in_lord_howe_fires_at_wall_time_right_after_half_hour_fall_back() -> None:
    # 2026-04-05 02:00 (+11) falls back to 01:30 (+10:30) at 15:00Z; 02:00 +10:30 (15:30Z) is a
    # real wall time 02:00. cronsim skips it (its tick lands on a step it never re-checks);
    # the rule "every real instant whose wall time matches" fires it, so we keep ours.
    sched = CronSchedule.parse("0 */2 * * *", "Australia/Lord_Howe")
    fires = fires_between(sched, _z("2026-04-04T12:00:00Z"), _z("2026-04-04T18:00:00Z"))
    assert fires == [
        _z("2026-04-04T13:00:00Z"),
        _z("2026-04-04T15:30:00Z"),
        _z("2026-04-04T17:30:00Z"),
    ]


def test_fixed_job_in_gap_crossing_midnight_in_santiago_fires_after_gap() -> None:
    # 2026-09-06: 00:00 (-4) jumps to 01:00 (-3) at 04:00Z; 00:30 does not exist.
    sched = CronSchedule.parse("30 0 * * *", "America/Santiago")
    fires = fires_between(sched, _z("2026-09-05T12:00:00Z"), _z("2026-09-07T12:00:00Z"))
    assert fires == [_z("2026-09-06T04:00:00Z"), _z("2026-09-07T03:30:00Z")]


def test_fires_between_excludes_after_and_includes_until() -> None:
    sched = CronSchedule.parse("0 * * * *", "UTC")
    fires = fires_between(sched, _z("2026-05-01T10:00:00Z"), _z("2026-05-01T12:00:00Z"))
    assert fires == [_z("2026-05-01T11:00:00Z"), _z("2026-05-01T12:00:00Z")]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("expr", ["30 1 * * *", "0 2 * * *", "15 * * * *", "0 0 1 * *"])
def test_next_fire_matches_first_of_fires_between(expr: str, zone: str) -> None:
    sched = CronSchedule.parse(expr, zone)
    fires = fires_between(sched, START, END)
    for before, expected in zip(fires[::97], fires[1::97], strict=False):
        assert next_fire(sched, before) == expected
        assert next_fire(sched, expected - timedelta(microseconds=1)) == expected


def test_next_fire_for_leap_day_job_jumps_years() -> None:
    sched = CronSchedule.parse("0 12 29 2 *", "Europe/Berlin")
    assert next_fire(sched, _z("2026-01-01T00:00:00Z")) == _z("2028-02-29T11:00:00Z")


@pytest.mark.parametrize(
    "expr",
    [
        "* * * *",
        "0 * * * * *",
        "*/5 * * * * 2026",
        "@reboot",
        "@daily",
        "every day",
        "61 * * * *",
        "0 24 * * *",
        "0 0 30 2 *",
        "0 0 ? * *",
        "0 0 1W * *",
        "H * * * *",
        "*/0 * * * *",
        "",
    ],
)
def test_parse_with_invalid_expression_raises_naming_field(expr: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        CronSchedule.parse(expr, "UTC", "source.cron")
    assert caught.value.field == "source.cron"


def test_parse_with_bad_zone_raises_naming_timezone() -> None:
    with pytest.raises(DefinitionError) as caught:
        CronSchedule.parse("0 * * * *", "local")
    assert caught.value.field == "timezone"


@pytest.mark.parametrize("expr", ["0 8 * * mon-fri", "0 0 L * *", "0 9 * * 5#2", "0 0 1 jan,jul *"])
def test_parse_with_names_last_day_and_nth_weekday_accepts(expr: str) -> None:
    assert CronSchedule.parse(expr, "UTC").expr == expr


def test_parse_normalises_whitespace() -> None:
    assert CronSchedule.parse("  0   8 * *  1-5 ", "UTC").expr == "0 8 * * 1-5"


@pytest.mark.parametrize("policy", ["skip", "latest", "bounded_3"])
def test_plan_due_reproduces_missed_run_vector(policy: str) -> None:
    case = VECTORS["missed_run_policies"][0]
    raw = {"bounded": 3} if policy == "bounded_3" else policy
    sched = CronSchedule.parse(case["cron"], case["timezone"])
    plan = plan_due(sched, _z(case["last_enumerated"]), _z(case["now"]), MissedPolicy.parse(raw))
    assert plan.fire == tuple(_z(f) for f in case[policy])
    assert plan.next_fire == _z(case["next_future"])
    assert plan.missed == 5
    assert plan.dropped == 5 - len(case[policy])
    assert plan.enumerated_through == _z("2026-11-29T10:05:00Z")


def test_plan_due_within_grace_fires_on_time_instant_under_skip() -> None:
    sched = CronSchedule.parse("* * * * *", "UTC")
    plan = plan_due(
        sched, _z("2026-11-29T10:00:00Z"), _z("2026-11-29T10:05:03Z"), MissedPolicy.parse("skip")
    )
    assert plan.fire == (_z("2026-11-29T10:05:00Z"),)
    assert (plan.missed, plan.dropped) == (4, 4)


def test_plan_due_with_bounded_fires_missed_oldest_first_then_on_time() -> None:
    sched = CronSchedule.parse("* * * * *", "UTC")
    policy = MissedPolicy.parse({"bounded": 2})
    plan = plan_due(sched, _z("2026-11-29T10:00:00Z"), _z("2026-11-29T10:05:01Z"), policy)
    assert plan.fire == (
        _z("2026-11-29T10:03:00Z"),
        _z("2026-11-29T10:04:00Z"),
        _z("2026-11-29T10:05:00Z"),
    )


def test_plan_due_never_enumerates_before_horizon() -> None:
    sched = CronSchedule.parse("0 * * * *", "UTC")
    plan = plan_due(
        sched,
        _z("2026-11-01T00:00:00Z"),
        _z("2026-11-29T10:30:00Z"),
        MissedPolicy.parse({"bounded": 100}),
        horizon=_z("2026-11-29T07:00:00Z"),
    )
    assert plan.fire == tuple(_z(f"2026-11-29T{h:02d}:00:00Z") for h in (7, 8, 9, 10))
    assert plan.missed == 4


def test_plan_due_with_nothing_due_keeps_last_enumerated() -> None:
    sched = CronSchedule.parse("0 * * * *", "UTC")
    last = _z("2026-11-29T10:00:00Z")
    plan = plan_due(sched, last, _z("2026-11-29T10:30:00Z"), MissedPolicy.parse("latest"))
    assert plan.fire == ()
    assert (plan.missed, plan.dropped) == (0, 0)
    assert plan.enumerated_through == last
    assert plan.next_fire == _z("2026-11-29T11:00:00Z")


def test_plan_due_across_fall_back_fires_each_hourly_instant_once() -> None:
    sched = CronSchedule.parse("0 * * * *", "America/New_York")
    policy = MissedPolicy.parse("latest")
    last, fired = _z("2026-11-01T03:30:00Z"), list[datetime]()
    now = last
    while now < _z("2026-11-01T08:00:00Z"):
        now += timedelta(minutes=1)
        plan = plan_due(sched, last, now, policy)
        fired.extend(plan.fire)
        last = plan.enumerated_through
    assert fired == [_z(f"2026-11-01T{h:02d}:00:00Z") for h in (4, 5, 6, 7, 8)]


@pytest.mark.parametrize(
    "raw",
    [
        "never",
        "",
        "Skip",
        {"bounded": 0},
        {"bounded": 101},
        {"bounded": True},
        {"bounded": "3"},
        {"bounded": 3, "extra": 1},
        {"latest": 1},
        3,
        None,
    ],
)
def test_missed_policy_parse_with_invalid_raises_definition_error(raw: object) -> None:
    with pytest.raises(DefinitionError) as caught:
        MissedPolicy.parse(raw)  # type: ignore[arg-type]
    assert caught.value.field is not None and caught.value.field.startswith("missed_runs")


def test_missed_policy_parse_reads_each_form() -> None:
    assert MissedPolicy.parse("skip") == MissedPolicy("skip")
    assert MissedPolicy.parse("latest") == MissedPolicy("latest")
    assert MissedPolicy.parse({"bounded": 100}) == MissedPolicy("bounded", 100)


@pytest.mark.parametrize(
    ("now", "status"),
    [
        ("2026-12-01T07:59:59Z", OneShot.NOT_DUE),
        ("2026-12-01T08:00:00Z", OneShot.DUE),
        ("2026-12-01T08:00:05Z", OneShot.DUE),
        ("2026-12-01T08:00:06Z", OneShot.LATE),
        ("2027-06-01T00:00:00Z", OneShot.LATE),
    ],
)
def test_one_shot_status_by_distance_from_due(now: str, status: OneShot) -> None:
    assert one_shot_status(_z("2026-12-01T08:00:00Z"), _z(now)) is status


@pytest.mark.parametrize(
    ("minutes", "expr"),
    [(1, "*/1 * * * *"), (5, "*/5 * * * *"), (15, "*/15 * * * *"), (60, "0 * * * *")],
)
def test_cadence_cron_for_allowed_cadence_returns_valid_cron(minutes: int, expr: str) -> None:
    assert cadence_cron(minutes) == expr
    assert CronSchedule.parse(expr, "UTC").expr == expr


@pytest.mark.parametrize("minutes", [0, 2, 10, 30, 120, True, -5])
def test_cadence_cron_with_other_value_raises_naming_cadence(minutes: int) -> None:
    with pytest.raises(DefinitionError) as caught:
        cadence_cron(minutes)
    assert caught.value.field == "cadence"


def test_cron_text_past_the_bound_is_refused_before_it_is_split_or_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import croniter

    import pipeline.rules.cron as cron

    def never(*_: Any) -> bool:
        raise AssertionError("croniter saw text past the bound")

    monkeypatch.setattr(croniter.croniter, "is_valid", never)
    every_minute = ",".join(str(m) for m in range(60)) + " * * * *"
    long_text = "*/5 " + " " * 1_000_000 + "* * * *"
    for text in (long_text, "1," * 200_000 + "1 * * * *"):
        with pytest.raises(DefinitionError, match=f"longer than {cron.MAX_CRON_CHARS}"):
            CronSchedule.parse(text, "UTC")
    monkeypatch.undo()
    assert CronSchedule.parse(every_minute, "UTC").expr == every_minute
