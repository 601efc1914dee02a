"""An event's evidence built natively is what the Python path builds (``native/src/event.rs``
against ``pipeline.records.event.evidence_from_event``): every slot the same value of the same
type, and every value the Python path refuses still refused with its reason — hostile fields
(wrong types, empty, over their byte bounds, lone surrogates), instants naive, in another zone
or out of range, payloads that are not JSON objects or break the bounds."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.records import event
from pipeline.records.event import _EVENT_SLOTS, MAX_PAYLOAD_BYTES, evidence_from_event
from pipeline.rules import bounds
from pipeline.rules.evidence import EvidenceKind
from pipeline.rules.native import NATIVE
from tests.native import needs_native, python_path

pytestmark = pytest.mark.unit

_MISSING = object()
_TEXTS = (
    st.text(max_size=8)
    | st.sampled_from(["", "é" * 64, "é" * 65, "x" * 256, "x" * 257, "\ud800", "a\x00b"])
    | st.none()
    | st.integers()
    | st.just(_MISSING)
)
_INSTANTS = (
    st.datetimes(timezones=st.just(UTC))
    | st.datetimes(timezones=st.just(timezone(timedelta(hours=-3))))
    | st.datetimes()  # naive
    | st.sampled_from(["2026-01-01T00:00:00Z", None, _MISSING])
)
_PAYLOADS = (
    st.dictionaries(st.text(max_size=4), st.integers() | st.floats() | st.text(max_size=4)).map(
        json.dumps
    )
    | st.sampled_from(
        [
            "[1, 2]",
            "null",
            '{"a": ',
            '{"a": 1e400}',
            '{"a": 9007199254740992}',
            '{"a": "\\ud800"}',
            "[" * 65 + "]" * 65,
            '{"x": "' + "y" * MAX_PAYLOAD_BYTES + '"}',
        ]
    )
    | st.none()
    | st.binary(max_size=8)
    | st.just(_MISSING)
)


def _value(fields: dict[str, Any]) -> dict[str, Any]:
    return {name: v for name, v in fields.items() if v is not _MISSING}


def _built(value: dict[str, Any]) -> Any:
    """Each slot's ``repr`` (type and value), or the refusal's type and message."""
    try:
        evidence = evidence_from_event(value, "events:0:7")
    except Exception as exc:
        return type(exc), str(exc)
    return type(evidence), [repr(getattr(evidence, name)) for name in _EVENT_SLOTS]


_NAMES = ("source_id", "event_type", "event_id", "envelope_id", "cursor", "observed_at", "payload")
_GOOD = {
    "source_id": st.text(min_size=1, max_size=8).filter(lambda t: t.isprintable()),
    "event_type": st.text(min_size=1, max_size=8),
    "event_id": st.text(min_size=1, max_size=64),
    "envelope_id": st.none() | st.text(min_size=1, max_size=8),
    "cursor": st.none() | st.text(min_size=1, max_size=300),
    "observed_at": st.datetimes(datetime(1970, 1, 1), timezones=st.just(UTC)),
    "payload": st.none()
    | st.dictionaries(st.text(max_size=4), st.integers(-(2**40), 2**40) | st.text(max_size=4)).map(
        json.dumps
    ),
}
_BAD = {name: _INSTANTS if name == "observed_at" else _PAYLOADS if name == "payload" else _TEXTS
        for name in _NAMES}  # fmt: skip


@needs_native
@settings(max_examples=400, deadline=None)
@given(
    good=st.fixed_dictionaries(_GOOD),
    broken=st.lists(st.sampled_from(_NAMES), max_size=2, unique=True),
    data=st.data(),
)
def test_evidence_built_natively_is_the_python_paths(
    good: dict[str, Any], broken: list[str], data: st.DataObject
) -> None:
    """A plain event, with none, one or two of its fields replaced by a hostile value."""
    value = _value({**good, **{name: data.draw(_BAD[name], name) for name in broken}})
    with python_path(event, bounds):
        expected = _built(value)
    assert _built(value) == expected


@needs_native
def test_a_plain_event_is_built_natively() -> None:
    """The plain case does not fall back (None would mean the Python path built it)."""
    value = {
        "source_id": "src.1",
        "event_type": "build.finished",
        "event_id": "e-1",
        "envelope_id": None,
        "cursor": "7",
        "observed_at": datetime(2026, 12, 4, 9, 30, tzinfo=UTC),
        "payload": '{"status": "failed", "n": 3}',
    }
    built = NATIVE.event_evidence(
        value, "events:0:7", event._NEW, event._SET_SLOTS, EvidenceKind.EVENT, event._LIMITS
    )
    assert built is not None
    with python_path(event, bounds):
        assert _built(value) == (type(built), [repr(getattr(built, n)) for n in _EVENT_SLOTS])
