"""The fast paths of ``pipeline.rules.keys`` give exactly what the reference paths give."""

from datetime import UTC, datetime
from typing import Any, TypedDict

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rules.errors import DefinitionError
from pipeline.rules.keys import (
    EventTrigger,
    InstantTrigger,
    RequestTrigger,
    Trigger,
    canonical_json,
    delivery_key,
    delivery_key_from,
    delivery_key_prefix,
    encode_fields,
)

pytestmark = pytest.mark.unit


class _PrefixFields(TypedDict):
    """The keywords of ``delivery_key_prefix`` (``delivery_key``'s, but its trigger)."""

    tenant_id: str
    user_id: str
    watcher_id: str
    watcher_version: int
    source_id: str


# Every character class that matters to RFC 8785: controls, quotes, backslashes, non-ASCII,
# U+E000..U+FFFF and astral characters (whose UTF-16 order differs), lone surrogates.
_TEXT = st.text(
    st.one_of(
        st.characters(max_codepoint=0x7F),
        st.sampled_from(['"', "\\", "\x00", "\x1f", "\x7f", "é", "\u2028", "\ue000", "\uffff"]),
        st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF),
        st.characters(),
    ),
    max_size=12,
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.integers(),  # beyond the safe range too
    st.floats(allow_nan=True, allow_infinity=True),
    _TEXT,
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(_TEXT, inner, max_size=4),
    ),
    max_leaves=20,
)


def reference(value: Any) -> bytes | type[Exception]:
    """What the rfc8785-only implementation gave: its bytes, or the error it raised."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, RecursionError, UnicodeError):
        return DefinitionError  # a lone surrogate key breaks rfc8785's UTF-16 sort: refused
    except Exception as exc:
        return type(exc)


def assert_like_reference(value: Any) -> None:
    expected = reference(value)
    if isinstance(expected, bytes):
        assert canonical_json(value) == expected
    else:
        with pytest.raises(expected):
            canonical_json(value)


@settings(max_examples=600, deadline=None)
@given(value=_JSON)
def test_canonical_json_equals_rfc8785_or_refuses_alike(value: Any) -> None:
    assert_like_reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"\U0001f600": 1, "\uffff": 2, "a": 3},  # UTF-16 order puts the astral key first
        {"b": [1, True, None, "x\ny"], "a": {"d": {}, "c": []}},
        {"n": 2**53 - 1, "m": -(2**53) + 1},
        "\ud800",  # lone surrogate
        {"\ud800": 1},  # lone surrogate in a key
        {1: "non-string key"},
        {"x": 2**53},
        [0.1, 1e21, -0.0],
    ],
)
def test_canonical_json_edge_cases_match_rfc8785(value: Any) -> None:
    assert_like_reference(value)


def test_canonical_json_of_deep_nesting_still_refuses() -> None:
    value: Any = []
    for _ in range(5000):
        value = [value]
    with pytest.raises(DefinitionError):
        canonical_json(value)


_TRIGGERS = st.one_of(
    st.builds(EventTrigger, _TEXT, _TEXT),
    st.builds(
        InstantTrigger,
        st.sampled_from(["poll", "schedule"]),
        st.datetimes(timezones=st.just(UTC)),
    ),
    st.builds(RequestTrigger, _TEXT),
)


@settings(max_examples=200, deadline=None)
@given(
    parts=st.tuples(_TEXT, _TEXT, _TEXT, st.integers(0, 2**40), _TEXT),
    trigger=_TRIGGERS,
)
def test_delivery_key_from_a_prefix_equals_delivery_key(
    parts: tuple[str, str, str, int, str], trigger: Trigger
) -> None:
    tenant, user, watcher, version, source = parts
    fields: _PrefixFields = {
        "tenant_id": tenant,
        "user_id": user,
        "watcher_id": watcher,
        "watcher_version": version,
        "source_id": source,
    }
    try:
        expected = delivery_key(**fields, trigger=trigger)
    except DefinitionError:  # a lone surrogate in a field
        with pytest.raises(DefinitionError):
            delivery_key_from(delivery_key_prefix(**fields), trigger)
        return
    assert delivery_key_from(delivery_key_prefix(**fields), trigger) == expected


@pytest.mark.parametrize("bad", [["a", 3], ["a", b"b"], ["a", "\udc00"]])
def test_encode_fields_with_a_bad_field_raises_definition_error(bad: list[Any]) -> None:
    with pytest.raises(DefinitionError):
        encode_fields(bad)


def test_encode_fields_accepts_string_subclasses_like_strings() -> None:
    class Name(str):
        pass

    assert encode_fields([Name("ab"), "c"]) == b"\x00\x00\x00\x02ab\x00\x00\x00\x01c"


def test_definition_key_prefix_gives_the_delivery_key_of_its_version() -> None:
    from pipeline.rules.definition import WatcherDefinition

    definition = WatcherDefinition.from_json(
        {
            "watcher_id": "w",
            "purpose": "ops.alert",
            "source": {"kind": "event", "source_id": "s", "event_type": "t", "max_age": "1h"},
            "condition": {"eq": ["status", "failed"]},
            "delivery": {"target": "hook", "verb": "notify"},
            "expires_at": "2030-01-01T00:00:00Z",
        },
        tenant_id="acme",
        user_id="ann",
    ).with_version(3)
    trigger = InstantTrigger("poll", datetime(2026, 1, 1, tzinfo=UTC))
    expected = delivery_key(
        tenant_id="acme",
        user_id="ann",
        watcher_id="w",
        watcher_version=3,
        source_id="s",
        trigger=trigger,
    )
    assert delivery_key_from(definition.key_prefix, trigger) == expected
