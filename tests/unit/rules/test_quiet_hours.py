"""Quiet hours: the window and the next allowed instant across DST (pipeline.rules.quiet_hours)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import parse_instant
from pipeline.rules.quiet_hours import QuietHours, is_quiet, next_allowed
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
MINUTE = timedelta(minutes=1)


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _transitions_2026(name: str) -> list[tuple[datetime, timedelta, timedelta]]:
    """(instant, offset before, offset after) of each 2026 transition, found by bisection."""
    zone = ZoneInfo(name)
    found = []
    hour = datetime(2026, 1, 1, tzinfo=UTC)
    while hour.year == 2026:
        after = hour + timedelta(hours=1)
        if _offset(zone, hour) != _offset(zone, after):
            low, high = hour, after
            while high - low > MINUTE:
                mid = low + (high - low) / 2
                if _offset(zone, mid) == _offset(zone, hour):
                    low = mid
                else:
                    high = mid
            found.append((high, _offset(zone, low), _offset(zone, high)))
        hour = after
    return found


def _minute_of_day(delta: timedelta) -> int:
    return int(delta.total_seconds() // 60) % 1440


def _window(start: int, end: int, name: str) -> QuietHours:
    return QuietHours.from_minutes(start % 1440, end % 1440, name)


@pytest.mark.parametrize("case", VECTORS["quiet_hours_next_allowed"], ids=lambda c: c["due"])
def test_next_allowed_reproduces_reference_vector(case: dict[str, str]) -> None:
    qh = QuietHours.parse(case["quiet_start"], case["quiet_end"], case["timezone"])
    assert next_allowed(qh, parse_instant(case["due"])) == parse_instant(case["next_allowed"])


def test_every_zone_has_one_spring_and_one_fall_transition_in_2026() -> None:
    for name in ZONES:
        kinds = sorted(after > before for _, before, after in _transitions_2026(name))
        assert kinds == [False, True], name


@pytest.mark.parametrize("name", ZONES)
def test_next_allowed_when_window_ends_inside_spring_gap_returns_transition(name: str) -> None:
    # Window [gap-60, gap+15) local: the jump at T lands past its end, so T itself is allowed.
    transition, before, _after = next(t for t in _transitions_2026(name) if t[2] > t[1])
    gap_start = _minute_of_day(transition + before - transition.replace(hour=0, minute=0))
    qh = _window(gap_start - 60, gap_start + 15, name)
    due = transition - timedelta(minutes=30)
    assert is_quiet(qh, due)
    assert next_allowed(qh, due) == transition


@pytest.mark.parametrize("name", ZONES)
def test_next_allowed_when_fall_back_repeats_window_waits_for_second_end(name: str) -> None:
    # Window ends at the wall time just before the fall-back: the clock goes back into the
    # window, so the exit is the *second* time the end is reached, (before - after) later.
    transition, before, after = next(t for t in _transitions_2026(name) if t[2] < t[1])
    end = _minute_of_day(transition + before - transition.replace(hour=0, minute=0))
    qh = _window(end - 180, end, name)
    due = transition - timedelta(minutes=30)
    assert is_quiet(qh, due)
    assert is_quiet(qh, transition)
    assert next_allowed(qh, due) == transition + (before - after)


@pytest.mark.parametrize("name", ZONES)
def test_next_allowed_when_fall_back_leaves_window_returns_transition(name: str) -> None:
    # Window covers only the last 15 minutes before the fall-back: going back exits it.
    transition, before, _after = next(t for t in _transitions_2026(name) if t[2] < t[1])
    end = _minute_of_day(transition + before - transition.replace(hour=0, minute=0))
    qh = _window(end - 15, end, name)
    due = transition - timedelta(minutes=10)
    assert next_allowed(qh, due) == transition


def test_next_allowed_with_non_wrapping_window_in_lord_howe_uses_half_hour_repeat() -> None:
    # 2026-04-05: 02:00 (+11) falls back to 01:30 (+10:30) at 15:00Z on 04-04.
    qh = QuietHours.parse("01:30", "02:00", "Australia/Lord_Howe")
    due = datetime(2026, 4, 4, 14, 40, tzinfo=UTC)  # 01:40 +11
    assert next_allowed(qh, due) == datetime(2026, 4, 4, 15, 30, tzinfo=UTC)  # 02:00 +10:30


def test_next_allowed_in_dublin_negative_dst_exits_at_gmt_end() -> None:
    # 2026-10-25 01:00Z: 02:00 IST (+1) becomes 01:00 GMT (+0); 01:00-01:30 happens twice.
    qh = QuietHours.parse("01:00", "01:30", "Europe/Dublin")
    assert next_allowed(qh, datetime(2026, 10, 25, 0, 10, tzinfo=UTC)) == datetime(
        2026, 10, 25, 0, 30, tzinfo=UTC
    )
    assert next_allowed(qh, datetime(2026, 10, 25, 1, 5, tzinfo=UTC)) == datetime(
        2026, 10, 25, 1, 30, tzinfo=UTC
    )


def test_next_allowed_when_not_quiet_returns_due_unchanged() -> None:
    qh = QuietHours.parse("22:00", "07:00", "Europe/Berlin")
    due = datetime(2026, 6, 1, 12, 0, 42, 5, tzinfo=UTC)
    assert next_allowed(qh, due) == due


def test_next_allowed_when_quiet_zeroes_seconds() -> None:
    qh = QuietHours.parse("22:00", "07:00", "Europe/Berlin")
    due = datetime(2026, 6, 1, 4, 59, 42, tzinfo=UTC)  # 06:59:42 CEST
    assert next_allowed(qh, due) == datetime(2026, 6, 1, 5, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("start", "end", "local", "quiet"),
    [
        ("22:00", "07:00", "23:59", True),
        ("22:00", "07:00", "00:00", True),
        ("22:00", "07:00", "06:59", True),
        ("22:00", "07:00", "07:00", False),
        ("22:00", "07:00", "21:59", False),
        ("09:00", "17:00", "09:00", True),
        ("09:00", "17:00", "16:59", True),
        ("09:00", "17:00", "17:00", False),
        ("09:00", "17:00", "08:59", False),
    ],
)
def test_is_quiet_with_wrapping_and_plain_windows(
    start: str, end: str, local: str, quiet: bool
) -> None:
    qh = QuietHours.parse(start, end, "Europe/Berlin")
    hour, minute = map(int, local.split(":"))
    instant = datetime(2026, 6, 1, hour, minute, tzinfo=ZoneInfo("Europe/Berlin"))
    assert is_quiet(qh, instant) is quiet


def test_parse_with_equal_start_and_end_raises_saying_so() -> None:
    with pytest.raises(DefinitionError, match="both") as caught:
        QuietHours.parse("22:00", "22:00", "Europe/Berlin")
    assert caught.value.field == "quiet_hours.end"


@pytest.mark.parametrize(
    ("start", "end", "zone", "field"),
    [
        ("25:00", "07:00", "Europe/Berlin", "quiet_hours.start"),
        ("22:00", "7", "Europe/Berlin", "quiet_hours.end"),
        ("22:00", "07:00", "Berlin", "quiet_hours.timezone"),
    ],
)
def test_parse_with_bad_part_raises_naming_field(
    start: str, end: str, zone: str, field: str
) -> None:
    with pytest.raises(DefinitionError) as caught:
        QuietHours.parse(start, end, zone)
    assert caught.value.field == field


_TRANSITION_DAYS = [
    t - timedelta(hours=12) for name in ZONES for t, _, _ in _transitions_2026(name)
]


@settings(max_examples=200, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    start=st.integers(0, 1439),
    length=st.integers(1, 1439),
    day=st.sampled_from(_TRANSITION_DAYS),
    offset_minutes=st.integers(0, 24 * 60),
    seconds=st.integers(0, 59),
)
def test_next_allowed_is_first_allowed_minute_property(
    zone: str, start: int, length: int, day: datetime, offset_minutes: int, seconds: int
) -> None:
    qh = _window(start, start + length, zone)
    due = day + timedelta(minutes=offset_minutes, seconds=seconds)
    result = next_allowed(qh, due)
    assert result >= due
    assert not is_quiet(qh, result)
    if result != due:
        assert result.second == 0 and result.microsecond == 0
        minute = due.replace(second=0)
        while minute < result:
            assert is_quiet(qh, minute)
            minute += MINUTE
