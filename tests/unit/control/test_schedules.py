"""Timing flags → a schedule source in the subject's zone, a watcher → its list entry, and its
newest receipt → its last fire (late past the ticker's grace)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.control.schedules import last_fire, next_look, schedule_view, timing_source
from pipeline.control.verbs import ScheduleRequest
from pipeline.rules.errors import DefinitionError
from pipeline.rules.zones import load_zone

pytestmark = pytest.mark.unit

BERLIN = load_zone("Europe/Berlin")
NOW = datetime(2026, 3, 28, 12, 0, 0, 250_000, tzinfo=UTC)


def _request(**timing: str) -> ScheduleRequest:
    return ScheduleRequest.model_validate({**timing, "argv": ["send", "x"]})


def test_in_counts_from_now_rounded_up_to_a_whole_second() -> None:
    assert timing_source(_request(**{"in": "2s"}), NOW, BERLIN) == {
        "kind": "schedule",
        "at": "2026-03-28T12:00:03Z",
    }


def test_cron_is_kept_with_the_subjects_zone() -> None:
    source = timing_source(_request(cron="30 7 * * 1-5"), NOW, BERLIN)
    assert source == {"kind": "schedule", "cron": "30 7 * * 1-5", "timezone": "Europe/Berlin"}


def test_bad_cron_names_the_cron_field() -> None:
    with pytest.raises(DefinitionError) as caught:
        timing_source(_request(cron="every morning"), NOW, BERLIN)
    assert caught.value.field == "cron"


def test_at_in_a_spring_forward_gap_is_a_clear_error() -> None:
    # 2026-03-29 02:30 does not exist in Berlin: clocks jump from 02:00 to 03:00.
    with pytest.raises(DefinitionError, match="does not exist"):
        timing_source(_request(at="2026-03-29T02:30"), NOW, BERLIN)


def test_at_with_an_offset_is_taken_as_written() -> None:
    source = timing_source(_request(at="2026-03-29T09:00:00+02:00"), NOW, BERLIN)
    assert source["at"] == "2026-03-29T07:00:00Z"


def test_schedule_view_of_a_cron_watcher_shows_its_next_fire_across_dst() -> None:
    watcher = {
        "watcher_id": "schedule:me:digest",
        "created_at": "2026-03-01T00:00:00.000000Z",
        "definition": {
            "source": {"kind": "schedule", "cron": "0 8 * * *", "timezone": "Europe/Berlin"},
            "delivery": {"target": "me", "verb": "prompt", "text": "digest"},
        },
    }
    view = schedule_view(watcher, NOW)
    assert view is not None
    # The next 08:00 in Berlin is on Sunday the 29th, after the switch to UTC+2.
    assert view["next_fire"] == "2026-03-29T06:00:00Z"
    assert (view["name"], view["chat"], view["argv"]) == ("digest", "me", ["prompt", "digest"])


def test_schedule_view_ignores_watchers_that_are_not_schedules() -> None:
    assert schedule_view({"watcher_id": "release-build-failed", "definition": {}}, NOW) is None


def _receipt(due: str, fired: str) -> dict[str, Any]:
    trigger = {"kind": "schedule", "scheduled_at": due}
    return {"trigger": trigger, "observed_at": fired, "outcome": "satisfied"}


def test_a_fire_within_the_tickers_grace_is_on_time_and_one_past_it_is_late() -> None:
    on_time = last_fire(_receipt("2026-03-28T12:00:00Z", "2026-03-28T12:00:05Z"))
    assert on_time == {
        "due_at": "2026-03-28T12:00:00Z",
        "fired_at": "2026-03-28T12:00:05Z",
        "late": False,
        "outcome": "satisfied",
    }
    late = last_fire(_receipt("2026-03-28T12:00:00Z", "2026-03-28T12:00:06Z"))
    assert late is not None and late["late"] is True


@given(st.recursive(st.none() | st.text() | st.integers(), lambda c: st.dictionaries(st.text(), c)))
def test_last_fire_of_any_shape_is_a_fire_or_none(receipt: Any) -> None:
    shown = last_fire(receipt if isinstance(receipt, dict) else {"trigger": receipt})
    assert shown is None or set(shown) == {"due_at", "fired_at", "late", "outcome"}


def test_next_look_of_a_cadence_a_cron_an_at_and_an_event() -> None:
    polling = {"kind": "polling", "source_id": "run:r-1", "tool": "workflow.run.status@v1"}
    cadence = {"source": {**polling, "target": "r-1", "cadence": "5m", "max_age": "2m"}}
    assert next_look(cadence, NOW) == "2026-03-28T12:05:00Z"
    cron = {"source": {"kind": "schedule", "cron": "0 9 * * *", "timezone": "Europe/Berlin"}}
    assert next_look(cron, NOW) == "2026-03-29T07:00:00Z"  # 09:00 in Berlin, summer time
    assert next_look({"source": {"kind": "schedule", "at": "2026-03-28T13:00:00Z"}}, NOW) == (
        "2026-03-28T13:00:00Z"
    )
    assert next_look({"source": {"kind": "schedule", "at": "2026-03-28T11:00:00Z"}}, NOW) is None
    assert next_look({"source": {"kind": "event", "source_id": "s"}}, NOW) is None


@pytest.mark.slow
@given(st.recursive(st.none() | st.text() | st.integers(), lambda c: st.dictionaries(st.text(), c)))
def test_next_look_of_any_shape_is_an_instant_or_none(source: Any) -> None:
    found = next_look({"source": source}, NOW)
    assert found is None or found.endswith("Z")
