"""A default message rendered natively is the Python rules' (``native/src/message.rs`` against
``pipeline.rules.message.default_message``), character for character: printable and unprintable
text, line breaks, bidirectional overrides and lone surrogates, values past ``MAX_VALUE``,
messages past ``MAX_MESSAGE``, every JSON scalar (big integers, floats, non-finite ones), objects
at a retained path, absent leaves, a leaf that reads "(absent)", instants in another zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rules import message
from pipeline.rules.message import ABSENT, MAX_VALUE, MessageFields, default_message
from pipeline.rules.native import NATIVE
from pipeline.rules.paths import parse_path
from tests.native import needs_native, python_path

pytestmark = pytest.mark.unit

_PLAIN = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=12)
_TEXT = (
    _PLAIN
    | _PLAIN
    | st.text(max_size=6)  # anything: breaks, controls, surrogates, non-ASCII
    | st.sampled_from([ABSENT, "x" * (MAX_VALUE + 1), "é" * 300, "a\u202eb", "l1\nl2"])
)
_SCALARS = (
    _TEXT
    | st.none()
    | st.booleans()
    | st.integers()
    | st.integers(10**40, 10**41)
    | st.floats()
    | st.dictionaries(st.sampled_from(["x", "y"]), st.integers(), max_size=2)
)
_PATHS = st.lists(
    st.sampled_from(["status", "n", "nested", "nested.x", "nested.x.y", "e_k.k", "list"]),
    max_size=5,
    unique=True,
)


@needs_native
@settings(max_examples=400, deadline=None)
@given(
    named=st.lists(_TEXT, min_size=3, max_size=3),
    event=st.none() | st.tuples(st.none() | _TEXT, _TEXT),
    payload=st.fixed_dictionaries(
        {},
        optional={
            "status": _SCALARS,
            "n": _SCALARS,
            "nested": _SCALARS,
            "e_k": st.dictionaries(st.just("k"), _SCALARS),
            "list": st.lists(st.integers(), max_size=2),
        },
    ),
    retained=_PATHS,
    zone=st.sampled_from([UTC, UTC, UTC, timezone(timedelta(hours=5, minutes=30))]),
    instant=st.datetimes(datetime(1970, 1, 2), datetime(9999, 12, 30)),
    lines=st.integers(0, 40),
)
def test_native_default_messages_are_the_python_rules(
    named: list[str],
    event: tuple[str | None, str] | None,
    payload: dict[str, Any],
    retained: list[str],
    zone: Any,
    instant: datetime,
    lines: int,
) -> None:
    watcher_id, purpose, outcome = named
    event_type, event_id = event if event is not None else (None, None)
    paths = tuple(parse_path(p, "retain") for p in retained)
    payload = {**payload, **{f"k{i}": "v" * 200 for i in range(lines)}}  # past MAX_MESSAGE
    paths += tuple((f"k{i}",) for i in range(lines))
    fields = MessageFields(
        watcher_id=watcher_id,
        purpose=purpose,
        outcome=outcome,
        observed_at=instant.replace(tzinfo=UTC).astimezone(zone),
        due_at=instant.replace(tzinfo=UTC),
        payload=payload,
        retained=paths,
        event_type=event_type,
        event_id=event_id,
    )
    with python_path(message):
        expected = default_message(fields)
    assert default_message(fields) == expected


@needs_native
def test_the_plain_message_is_rendered_natively() -> None:
    """The plain case does not fall back (None would mean the Python path rendered it)."""
    fields = MessageFields(
        watcher_id="build-failed",
        purpose="ops.alert",
        outcome="satisfied",
        observed_at=datetime(2026, 12, 4, 9, 30, 5, 123, tzinfo=UTC),
        due_at=datetime(2026, 12, 4, 9, 30, 5, tzinfo=UTC),
        payload={"status": "failed", "n": 3, "ratio": 0.5, "ok": True, "gone": None},
        retained=(("status",), ("n",), ("ratio",), ("ok",), ("gone",), ("missing",)),
        event_type="build",
        event_id="b-1",
    )
    named = (
        fields.named[n] for n in ("watcher_id", "purpose", "outcome", "event_type", "event_id")
    )
    args = (fields.named["observed_at"], fields.leaves, fields.retained, MAX_VALUE, 4096, ABSENT)
    native = NATIVE.default_message(tuple(named), *args)
    with python_path(message):
        assert native == default_message(fields)
    assert native.splitlines()[-1] == "gone: null"
