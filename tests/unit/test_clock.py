"""The test-only scaled clock: every process given one anchor and rate reads one time."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from pipeline.clock import (
    CLOCK_ANCHOR_ENV,
    CLOCK_RATE_ENV,
    ScaledClock,
    SystemClock,
    clock_from_env,
)
from pipeline.rules.errors import ConfigError

pytestmark = pytest.mark.unit

ANCHOR = 1_800_000_000.0


def test_scaled_clock_runs_rate_times_faster_from_its_anchor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(time, "time", lambda: ANCHOR + 10.0)
    scaled = ScaledClock(ANCHOR, 6.0)
    assert scaled.now() == datetime.fromtimestamp(ANCHOR + 60.0, UTC)
    assert scaled.now().tzinfo is UTC


def test_without_the_variables_a_process_reads_the_real_clock() -> None:
    assert isinstance(clock_from_env({}), SystemClock)


def test_two_processes_with_one_anchor_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: ANCHOR + 3.0)
    env = {CLOCK_RATE_ENV: "10", CLOCK_ANCHOR_ENV: repr(ANCHOR)}
    first, second = clock_from_env(env), clock_from_env(dict(env))
    assert first.now() == second.now() == datetime.fromtimestamp(ANCHOR + 30.0, UTC)


@pytest.mark.parametrize(
    "env",
    [
        {CLOCK_RATE_ENV: "fast"},
        {CLOCK_RATE_ENV: "0"},
        {CLOCK_RATE_ENV: "-2"},
        {CLOCK_RATE_ENV: "1e9"},
        {CLOCK_RATE_ENV: "2", CLOCK_ANCHOR_ENV: "yesterday"},
    ],
)
def test_a_bad_setting_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        clock_from_env(env)
