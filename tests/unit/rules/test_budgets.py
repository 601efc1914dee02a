"""Pure budget rules: window math, caps and defaults, the all-or-nothing check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pipeline.rules.budgets import (
    MAX_AMOUNT,
    BudgetCaps,
    BudgetCheck,
    BudgetVerdict,
    Dimension,
    attempt_token,
    check,
    offset_token,
    window_end,
    window_start,
)
from pipeline.rules.errors import DefinitionError

pytestmark = pytest.mark.unit

HOUR = timedelta(hours=1)
T = datetime(2026, 3, 8, 7, 42, 13, 500_000, tzinfo=UTC)


def test_window_start_floors_epoch_seconds_to_the_length() -> None:
    assert window_start(T, HOUR) == datetime(2026, 3, 8, 7, tzinfo=UTC)
    assert window_start(T, timedelta(minutes=7)).timestamp() % 420 == 0


def test_window_start_of_a_day_is_utc_midnight_whatever_the_input_offset() -> None:
    local = T.astimezone(datetime.fromisoformat("2026-01-01T00:00:00+05:30").tzinfo)
    assert window_start(local, timedelta(days=1)) == datetime(2026, 3, 8, tzinfo=UTC)


def test_window_end_is_the_next_window_start() -> None:
    end = window_end(T, HOUR)
    assert end == datetime(2026, 3, 8, 8, tzinfo=UTC)
    assert window_start(end, HOUR) == end


def test_window_start_of_naive_instant_raises() -> None:
    with pytest.raises(ValueError, match="naive"):
        window_start(datetime(2026, 1, 1), HOUR)


@given(
    t=st.datetimes(
        min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
    seconds=st.integers(min_value=1, max_value=7 * 86_400),
)
def test_window_start_contains_instant_and_sits_on_the_grid(t: datetime, seconds: int) -> None:
    length = timedelta(seconds=seconds)
    start = window_start(t, length)
    assert start <= t < start + length
    assert int(start.timestamp()) % seconds == 0


def test_budget_caps_parse_duration_text_for_window() -> None:
    assert BudgetCaps(window="1h30m").window == timedelta(minutes=90)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "window", [timedelta(0), timedelta(seconds=-5), timedelta(milliseconds=1500)]
)
def test_budget_caps_with_non_whole_or_non_positive_window_raise(window: timedelta) -> None:
    with pytest.raises(ValidationError, match="whole number of seconds"):
        BudgetCaps(window=window)


@pytest.mark.parametrize("value", [-1, MAX_AMOUNT + 1, True, 1.0])
def test_budget_caps_with_negative_huge_or_non_int_cap_raise(value: object) -> None:
    with pytest.raises(ValidationError):
        BudgetCaps(window=HOUR, deliveries=value)  # type: ignore[arg-type]


def test_budget_caps_are_frozen() -> None:
    caps = BudgetCaps(window=HOUR, deliveries=2)
    with pytest.raises(ValidationError):
        caps.deliveries = 3  # type: ignore[misc]


def test_with_defaults_fills_only_unset_dimensions() -> None:
    mine = BudgetCaps(window=HOUR, deliveries=2, tokens=0)
    operator = BudgetCaps(window=timedelta(days=1), deliveries=100, attempts=50, tokens=9)
    filled = mine.with_defaults(operator)
    assert filled.window == HOUR
    assert (filled.deliveries, filled.attempts, filled.tokens) == (2, 50, 0)
    assert filled.evaluations is None  # no default either: uncapped


def test_check_within_caps_is_ok_and_reports_remaining() -> None:
    caps = BudgetCaps(window=HOUR, deliveries=3, attempts=10)
    result = check(
        caps, {Dimension.DELIVERIES: 1}, {Dimension.DELIVERIES: 1, Dimension.ATTEMPTS: 1}
    )
    assert result.verdict is BudgetVerdict.OK
    assert result.exhausted is None
    assert result.remaining[Dimension.DELIVERIES] == 1
    assert result.remaining[Dimension.ATTEMPTS] == 9
    assert result.remaining[Dimension.TOKENS] is None


def test_check_that_fills_a_cap_exactly_is_ok() -> None:
    caps = BudgetCaps(window=HOUR, micro_usd=500)
    assert check(caps, {Dimension.MICRO_USD: 200}, {Dimension.MICRO_USD: 300}).verdict is (
        BudgetVerdict.OK
    )


def test_check_over_one_dimension_refuses_all_and_charges_nothing() -> None:
    caps = BudgetCaps(window=HOUR, deliveries=5, attempts=2)
    used = {Dimension.DELIVERIES: 1, Dimension.ATTEMPTS: 2}
    result = check(caps, used, {Dimension.DELIVERIES: 1, Dimension.ATTEMPTS: 1})
    assert result.verdict is BudgetVerdict.EXHAUSTED
    assert result.exhausted is Dimension.ATTEMPTS
    assert result.remaining[Dimension.DELIVERIES] == 4  # unchanged: nothing was charged
    assert result.remaining[Dimension.ATTEMPTS] == 0


def test_check_names_the_first_exhausted_dimension_in_declaration_order() -> None:
    caps = BudgetCaps(window=HOUR, deliveries=0, attempts=0)
    result = check(caps, {}, {Dimension.ATTEMPTS: 1, Dimension.DELIVERIES: 1})
    assert result.exhausted is Dimension.DELIVERIES


def test_check_with_zero_cap_allows_zero_cost_only() -> None:
    caps = BudgetCaps(window=HOUR, tokens=0)
    assert check(caps, {}, {Dimension.TOKENS: 0}).verdict is BudgetVerdict.OK
    assert check(caps, {}, {Dimension.TOKENS: 1}).verdict is BudgetVerdict.EXHAUSTED


def test_check_with_uncapped_dimension_never_exhausts_it() -> None:
    caps = BudgetCaps(window=HOUR)
    result = check(caps, {Dimension.TOKENS: MAX_AMOUNT - 1}, {Dimension.TOKENS: 1})
    assert result.verdict is BudgetVerdict.OK


@pytest.mark.parametrize("amount", [-1, MAX_AMOUNT + 1, True, 2.5])
def test_check_with_invalid_increment_raises_naming_the_field(amount: object) -> None:
    with pytest.raises(DefinitionError) as info:
        check(BudgetCaps(window=HOUR), {}, {Dimension.TOKENS: amount})  # type: ignore[dict-item]
    assert info.value.field == "increment.tokens"


def test_verdict_for_reports_exhaustion_only_to_its_dimension() -> None:
    refused = BudgetCheck(BudgetVerdict.EXHAUSTED, Dimension.ATTEMPTS)
    assert refused.verdict_for(Dimension.ATTEMPTS) is BudgetVerdict.EXHAUSTED
    assert refused.verdict_for(Dimension.DELIVERIES) is BudgetVerdict.OK
    down = BudgetCheck.unavailable()
    assert down.verdict_for(Dimension.DELIVERIES) is BudgetVerdict.UNAVAILABLE


def test_idempotency_tokens_name_their_origin_and_differ_per_attempt() -> None:
    assert attempt_token("k", 1) != attempt_token("k", 2)
    assert offset_token("vigil.events", 3, 17) == "offset:vigil.events:3:17"
