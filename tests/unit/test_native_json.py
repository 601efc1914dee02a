"""JSON text read natively is what the Python path reads (``native/src/json.rs`` against
``pipeline.rules.bounds.parse_json``): the same values of the same exact types in the same
order, on valid and hostile text (surrogate escapes and lone surrogates, integers past 2^53,
exponents, NaN, deep nesting, repeated keys, broken text). Text outside the native subset is
left to the Python path, whose value or refusal stands."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rules import bounds
from pipeline.rules.bounds import MAX_JSON_DEPTH, MAX_JSON_NODES, SAFE_JSON_INT, parse_json
from pipeline.rules.errors import DefinitionError
from pipeline.rules.native import NATIVE
from tests.native import needs_native, python_path
from tests.unit.test_native import _JSON

pytestmark = pytest.mark.unit


def _read(text: str, max_int: int) -> Any:
    """What ``parse_json`` gives on the path this process runs: ``repr`` of the value (it tells
    ``1`` from ``1.0`` and ``True``, ``-0.0`` from ``0.0``, and shows key order), or the
    refusal's message."""
    try:
        return repr(parse_json(text, "payload", max_bytes=1 << 20, max_int=max_int))
    except DefinitionError as exc:
        return exc.message


def _both(text: str, max_int: int = SAFE_JSON_INT) -> None:
    with python_path(bounds):
        expected = _read(text, max_int)
    assert _read(text, max_int) == expected
    native = NATIVE.parse_json(text, MAX_JSON_DEPTH, MAX_JSON_NODES)
    if native is not None:  # None: read (or refused) by the Python path
        assert repr(native[0]) == expected


_LAYOUT = st.sampled_from(
    [
        {},
        {"ensure_ascii": False},
        {"separators": (",", ":")},
        {"indent": 2},
        {"indent": "\t", "ensure_ascii": False},
    ]
)


@needs_native
@settings(max_examples=300, deadline=None)
@given(value=_JSON, layout=_LAYOUT, max_int=st.sampled_from([SAFE_JSON_INT, 2**63]))
def test_dumped_values_read_back_as_the_python_path_reads_them(
    value: Any, layout: dict[str, Any], max_int: int
) -> None:
    _both(json.dumps(value, **layout), max_int)


_PIECES = st.sampled_from(
    ['{"a":', '"b"', ":", ",", "[", "]", "{", "}", "1", "-0", "0.5", "1e3", "01", "true",
     "null", "NaN", "-Infinity", '"\\ud800"', '"\\ud83d\\ude00"', '"\\u00e9"', '"\x01"', " ",
     "\n", "12345678901234567", "1.", ".5", '"\\x"', '"é"']
)  # fmt: skip


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_broken_and_odd_text_reads_or_refuses_as_the_python_path(text: str) -> None:
    _both(text)


@needs_native
@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "b": 2, "a": 3}',  # a repeated key: its first place, its last value
        '{"n": 9007199254740991, "m": -9007199254740992}',  # 2^53 - 1 and past it
        '{"big": 123456789012345678901234567890}',
        '{"x": 1E400}',
        '{"x": -0, "y": -0.0, "z": 0.1}',
        '"\\ud834\\udd1e and \\udc00 alone"',
        "[" * 64 + "]" * 64,
        "[" * 65 + "]" * 65,
        "[" * 3000 + "]" * 3000,
        '  {"a": [true, false, null, "\\"\\\\\\/\\b\\f\\n\\r\\t"]}  ',
        "",
        "[1,]",
        '{"a" 1}',
    ],
)
def test_edge_texts_are_the_python_paths(text: str) -> None:
    _both(text)


@needs_native
def test_plain_payloads_are_read_natively() -> None:
    """The subset an event's payload is in is read natively (None would mean the Python path)."""
    text = '{"status": "passed", "n": 12, "ratio": 0.25, "tags": ["a", "é"], "ok": true}'
    assert NATIVE.parse_json(text, MAX_JSON_DEPTH, MAX_JSON_NODES) == (json.loads(text),)
    assert NATIVE.parse_json("[" * 65 + "]" * 65, MAX_JSON_DEPTH, MAX_JSON_NODES) is None
    wide = "[" + ",".join(["0"] * (MAX_JSON_NODES + 1)) + "]"
    assert NATIVE.parse_json(wide, MAX_JSON_DEPTH, MAX_JSON_NODES) is None
