"""The wake stream's bounds: a resume position is honoured only on the subject's own partition
and within the recent window, whatever the client sends; open streams are counted per caller
and in total, and a released slot is free again."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.control.http.wake_reader import (
    RESUME_WINDOW,
    StreamSlots,
    WakeLimits,
    _resume_offset,
)

pytestmark = pytest.mark.unit


def test_a_recent_position_of_the_same_partition_resumes_just_after_it() -> None:
    assert _resume_offset("notifications:1:41", 1, 100) == 42
    assert _resume_offset("notifications:2:41", 1, 100) is None, "another partition"
    assert _resume_offset("notifications:1:99", 1, 100) is None, "nothing after it yet: the end"
    old = 50_000 - RESUME_WINDOW - 2
    assert _resume_offset(f"notifications:1:{old}", 1, 50_000) is None, "too old: from the end"


@given(st.text(max_size=200), st.integers(0, 3), st.integers(0, 2**40))
def test_any_last_event_id_is_a_bounded_start_or_none(text: str, partition: int, end: int) -> None:
    found = _resume_offset(text, partition, end)
    assert found is None or end - RESUME_WINDOW <= found < end


def test_slots_bound_each_caller_and_the_total_and_come_back_when_released() -> None:
    slots = StreamSlots(WakeLimits(streams=3, per_principal=2))
    assert slots.acquire("a") and slots.acquire("a")
    assert not slots.acquire("a"), "a third stream of one caller"
    assert slots.acquire("b")
    assert not slots.acquire("c"), "the API's total"
    slots.release("a")
    assert slots.acquire("c")
