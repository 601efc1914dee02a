"""Hostile input meets total parsers (DESIGN.md §10 "Hostile input"): every reproduced failure
of issue 14 is now a named refusal, and what is accepted writes back as it reads."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.records.codec import parse_json as record_json
from pipeline.records.event import payload_object
from pipeline.rules.bounds import (
    MAX_DURATION,
    MAX_JSON_DEPTH,
    bounded_text,
    check_json,
    parse_json,
)
from pipeline.rules.budgets import BudgetCaps, BudgetCeilings, resolve_caps
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.durations import parse_duration
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.instants import parse_instant, rfc3339_micros, rfc3339_seconds
from pipeline.rules.sources import checked_ref

pytestmark = pytest.mark.unit


def body(**extra: Any) -> dict[str, Any]:
    return {
        "watcher_id": "w-1",
        "purpose": "ops.alert",
        "source": {"kind": "event", "source_id": "ci", "event_type": "build", "max_age": "10m"},
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "ops-hook"},
        "expires_at": "2030-01-01T00:00:00Z",
        **extra,
    }


def definition(**extra: Any) -> WatcherDefinition:
    return WatcherDefinition.from_json(body(**extra), tenant_id="acme", user_id="u-1")


@pytest.mark.parametrize(
    "text", ["99999999999d", "3654d", "800000d", "1" * 20_000 + "s", "9" * 40, "87672h1s"]
)
def test_duration_beyond_ten_years_or_overlong_is_a_definition_error(text: str) -> None:
    with pytest.raises(DefinitionError):
        parse_duration(text, "source.max_age")


def test_duration_of_exactly_ten_years_is_accepted() -> None:
    assert parse_duration(f"{MAX_DURATION.days}d") == MAX_DURATION


def test_delivery_retention_of_800000_days_is_refused_naming_the_field() -> None:
    with pytest.raises(DefinitionError) as caught:
        definition(privacy={"delivery_retention": "800000d"})
    assert caught.value.field == "privacy.delivery_retention"


@pytest.mark.parametrize(
    "text",
    [
        "0001-01-01T00:00:00Z",
        "1969-12-31T23:59:59Z",
        "9999-12-31T23:59:59-01:00",
        "0001-01-01T00:00:00+01:00",
        "2026-01-01T00:00:00Z" + " " * 100,
    ],
)
def test_instant_outside_1970_to_9999_is_a_definition_error(text: str) -> None:
    with pytest.raises(DefinitionError):
        parse_instant(text, "expires_at")


def test_expires_at_year_one_is_refused_never_rewritten() -> None:
    with pytest.raises(DefinitionError) as caught:
        definition(expires_at="0001-01-01T00:00:00Z")
    assert caught.value.field == "expires_at"


@pytest.mark.parametrize("year", [1970, 2026, 9999])
def test_accepted_instants_write_back_with_four_digits_and_read_back(year: int) -> None:
    at = datetime(year, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert rfc3339_seconds(at).startswith(f"{year:04d}-")
    assert parse_instant(rfc3339_micros(at)) == at
    accepted = definition(expires_at=rfc3339_micros(at)).with_version(7)
    assert accepted.expires_at == at and accepted.version == 7


def test_years_below_one_thousand_are_written_with_four_digits() -> None:
    at = datetime(999, 5, 6, tzinfo=UTC)
    assert rfc3339_seconds(at) == "0999-05-06T00:00:00Z"
    assert rfc3339_micros(at) == "0999-05-06T00:00:00.000000Z"


def test_megabyte_reference_is_refused_by_its_length() -> None:
    with pytest.raises(DefinitionError) as caught:
        checked_ref("a" * 1_000_000, "delivery.target")
    assert "at most 200" in caught.value.message
    with pytest.raises(DefinitionError) as caught:
        definition(delivery={"target": "a:" * 500_000})
    assert caught.value.field == "delivery.target"


def test_bounded_text_checks_type_and_length_before_anything_else() -> None:
    assert bounded_text("abc", "f", 3) == "abc"
    for bad in ("abcd", 3, None):
        with pytest.raises(DefinitionError):
            bounded_text(bad, "f", 3)


def nested(depth: int) -> Any:
    """``depth`` objects, each holding the next; the innermost holds a number."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (nested(MAX_JSON_DEPTH + 1), "nested deeper"),
        ([2**63 + 1], "larger than"),
        ({"x": float("nan")}, "not finite"),
        ({"x": float("inf")}, "not finite"),
        ({1: "a"}, "key is not a string"),
    ],
)
def test_check_json_refuses_what_breaks_a_bound(value: Any, why: str) -> None:
    with pytest.raises(DefinitionError, match=why):
        check_json(value, "condition")


def test_check_json_accepts_the_bounds_themselves() -> None:
    check_json([nested(MAX_JSON_DEPTH - 1), 2**63, -(2**63), 1.5, None, True, "x"])


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000 + "]" * 200_000,
        '{"a": NaN}',
        '{"a": Infinity}',
        '{"a": 1e999}',
        '{"a": ' + "9" * 20_000 + "}",
        json.dumps(nested(MAX_JSON_DEPTH + 1)),
        "not json",
        b"\xff\xfe",
    ],
)
def test_parse_json_refuses_hostile_text(text: str | bytes) -> None:
    with pytest.raises(DefinitionError):
        parse_json(text, "payload", max_bytes=10_000_000)


def test_parse_json_refuses_text_over_its_size_before_parsing() -> None:
    with pytest.raises(DefinitionError, match="larger than"):
        parse_json("{}" + " " * 100, "payload", max_bytes=50)


def test_a_payload_must_be_canonicalizable_or_it_is_undecodable() -> None:
    assert payload_object('{"n": 9007199254740991}') == {"n": 2**53 - 1}
    for text in ('{"n": 9007199254740992}', '{"n": NaN}', "[1]", "[" * 100 + "]" * 100):
        with pytest.raises(SerdeError):
            payload_object(text)
    with pytest.raises(SerdeError):
        record_json("{" * 10, "trigger")


def test_definition_body_nested_200k_deep_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError, match="nested deeper"):
        WatcherDefinition.from_json(
            body(condition=nested(200_000)), tenant_id="acme", user_id="u-1"
        )


def test_budget_cap_above_the_operator_ceiling_is_refused_and_clamped_where_resolved() -> None:
    ceilings = BudgetCeilings(deliveries=50)
    caps = BudgetCaps(window=timedelta(hours=1), deliveries=500)
    with pytest.raises(DefinitionError) as caught:
        ceilings.check(caps)
    assert caught.value.field == "budgets.deliveries"
    defaults = BudgetCaps(window=timedelta(hours=1), deliveries=80, attempts=10)
    resolved = resolve_caps(caps, defaults, ceilings)
    assert resolved.deliveries == 50 and resolved.attempts == 10
    assert resolve_caps(None, defaults, ceilings).deliveries == 50
    uncapped = BudgetCaps(window=timedelta(hours=1))
    assert resolve_caps(uncapped, uncapped, ceilings).deliveries == 50


def test_budget_window_longer_than_ten_years_is_refused() -> None:
    with pytest.raises(DefinitionError) as caught:
        definition(budgets={"window": "4000d"})
    assert caught.value.field == "budgets.window"


def _strftime_micros(at: datetime) -> str:
    """The former strftime form of ``rfc3339_micros``: the reference the fast one must match."""
    at = at.astimezone(UTC)
    return f"{at.year:04d}{at.strftime('-%m-%dT%H:%M:%S.%fZ')}"


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=11))]
        ),
    )
)
def test_rfc3339_forms_match_strftime_for_every_aware_instant(at: datetime) -> None:
    assert rfc3339_micros(at) == _strftime_micros(at)
    assert rfc3339_seconds(at) == _strftime_micros(at)[:19] + "Z"
