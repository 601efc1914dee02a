"""Zones, local wall times, ``--at`` and ``HH:MM`` (pipeline.rules.zones)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeline.rules.errors import DefinitionError
from pipeline.rules.zones import load_zone, parse_at, parse_clock, resolve_local

pytestmark = pytest.mark.unit

NEW_YORK = load_zone("America/New_York")


@pytest.mark.parametrize(
    "name",
    [
        "America/New_York",
        "Europe/Berlin",
        "Australia/Lord_Howe",
        "Europe/Dublin",
        "Pacific/Chatham",
        "America/Santiago",
        "UTC",
    ],
)
def test_load_zone_with_iana_name_returns_that_zone(name: str) -> None:
    assert load_zone(name).key == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "local",
        "localtime",
        "Factory",
        "/etc/localtime",
        "../etc/passwd",
        "Europe/../UTC",
        "Mars/Olympus",
        "utc ",
        "europe/berlin",
        "Europe\\Berlin",
        None,
        5,
    ],
)
def test_load_zone_with_non_zone_raises_naming_field(name: object) -> None:
    with pytest.raises(DefinitionError) as caught:
        load_zone(name, "watcher.source.timezone")  # type: ignore[arg-type]
    assert caught.value.field == "watcher.source.timezone"


def test_resolve_local_in_fall_back_overlap_returns_first_occurrence() -> None:
    # 01:30 happens at 05:30Z (EDT) and again at 06:30Z (EST) on 2026-11-01.
    assert resolve_local(datetime(2026, 11, 1, 1, 30), NEW_YORK) == datetime(
        2026, 11, 1, 5, 30, tzinfo=UTC
    )


def test_resolve_local_in_spring_forward_gap_raises_naming_field() -> None:
    with pytest.raises(DefinitionError, match="does not exist") as caught:
        resolve_local(datetime(2026, 3, 8, 2, 30), NEW_YORK, "schedule.at")
    assert caught.value.field == "schedule.at"


def test_resolve_local_on_ordinary_time_uses_that_days_offset() -> None:
    assert resolve_local(datetime(2026, 7, 1, 8, 0), NEW_YORK) == datetime(
        2026, 7, 1, 12, 0, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T08:00", datetime(2026, 12, 1, 13, 0, tzinfo=UTC)),
        ("2026-12-01 08:00", datetime(2026, 12, 1, 13, 0, tzinfo=UTC)),
        ("2026-12-01T08:00:30", datetime(2026, 12, 1, 13, 0, 30, tzinfo=UTC)),
        ("2026-12-01T08:00:00Z", datetime(2026, 12, 1, 8, 0, tzinfo=UTC)),
        ("2026-12-01T08:00:00+01:00", datetime(2026, 12, 1, 7, 0, tzinfo=UTC)),
        ("2026-11-01T01:30", datetime(2026, 11, 1, 5, 30, tzinfo=UTC)),
    ],
)
def test_parse_at_reads_offset_or_local_time(text: str, expected: datetime) -> None:
    assert parse_at(text, NEW_YORK) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "tomorrow",
        "2026-12-01",
        "2026-13-01T08:00",
        "2026-12-01T25:00",
        "20261201T0800",
        "2026-12-01T08",
        "2026-03-08T02:30",
    ],
)
def test_parse_at_with_bad_or_nonexistent_time_raises_naming_at(text: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_at(text, NEW_YORK)
    assert caught.value.field == "at"


@pytest.mark.parametrize(("text", "minute"), [("00:00", 0), ("07:30", 450), ("23:59", 1439)])
def test_parse_clock_returns_minute_of_day(text: str, minute: int) -> None:
    assert parse_clock(text, "quiet_hours.start") == minute


@pytest.mark.parametrize("text", ["24:00", "7:00", "07:60", "0700", " 07:00", "07:00:00", ""])
def test_parse_clock_with_non_hhmm_raises_naming_field(text: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_clock(text, "quiet_hours.end")
    assert caught.value.field == "quiet_hours.end"
