"""Backoff waits of DESIGN.md §8, checked against the shared reference vectors."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.rules.backoff import backoff_wait
from tests.vectors import VECTORS

pytestmark = pytest.mark.unit

KEY = "d8df8ea3ef289f91ed6f1413ff71391ff3564fb87935198b25f9f9916e3e6c94"
BASE = timedelta(seconds=5)
CAP = timedelta(hours=1)


@pytest.mark.parametrize(
    "case", VECTORS["backoff_seconds"], ids=lambda c: f"n{c['failed_attempts']}"
)
def test_backoff_wait_reproduces_reference_vector_to_the_microsecond(
    case: dict[str, object],
) -> None:
    wait = backoff_wait(
        str(case["delivery_key"]),
        int(str(case["failed_attempts"])),
        timedelta(seconds=float(str(case["base_s"]))),
        timedelta(seconds=float(str(case["cap_s"]))),
    )
    assert wait == timedelta(seconds=float(str(case["wait_s"])))


def test_backoff_wait_past_cap_stays_within_cap_plus_ten_percent() -> None:
    wait = backoff_wait(KEY, 40, BASE, CAP)
    assert CAP <= wait <= CAP * 1.1


def test_backoff_wait_with_longer_retry_after_uses_retry_after() -> None:
    assert backoff_wait(KEY, 1, BASE, CAP, retry_after=timedelta(minutes=2)) == timedelta(minutes=2)


def test_backoff_wait_with_shorter_retry_after_keeps_backoff() -> None:
    plain = backoff_wait(KEY, 3, BASE, CAP)
    assert backoff_wait(KEY, 3, BASE, CAP, retry_after=timedelta(seconds=1)) == plain


def test_backoff_wait_differs_per_key_through_jitter() -> None:
    assert backoff_wait("a" * 64, 2, BASE, CAP) != backoff_wait("b" * 64, 2, BASE, CAP)


@pytest.mark.parametrize("n", [0, -1])
def test_backoff_wait_before_any_failure_raises(n: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        backoff_wait(KEY, n, BASE, CAP)


def test_backoff_wait_with_cap_below_base_raises() -> None:
    with pytest.raises(ValueError, match="base <= cap"):
        backoff_wait(KEY, 1, CAP, BASE)


@given(n=st.integers(min_value=1, max_value=200), key=st.text(max_size=70))
def test_backoff_wait_is_deterministic_and_bounded(n: int, key: str) -> None:
    wait = backoff_wait(key, n, BASE, CAP)
    raw = min(CAP, BASE * 2 ** min(n - 1, 40))
    assert wait == backoff_wait(key, n, BASE, CAP)
    assert raw <= wait <= raw * 1.1
