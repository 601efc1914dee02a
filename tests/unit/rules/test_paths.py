"""The shared dotted-path grammar and resolution."""

from __future__ import annotations

import pytest

from pipeline.rules.errors import DefinitionError
from pipeline.rules.paths import MISSING, format_path, parse_path, resolve

pytestmark = pytest.mark.unit


def test_parse_path_splits_valid_segments() -> None:
    assert parse_path("commit.sha", "f") == ("commit", "sha")
    assert parse_path("_a.B9", "f") == ("_a", "B9")
    assert format_path(("commit", "sha")) == "commit.sha"


@pytest.mark.parametrize("bad", ["", ".", "a.", ".a", "a..b", "9a", "a b", "a\n", "é", "a-b"])
def test_parse_path_outside_grammar_raises_naming_field(bad: str) -> None:
    with pytest.raises(DefinitionError) as info:
        parse_path(bad, "where")
    assert info.value.field == "where"


def test_parse_path_of_non_string_raises() -> None:
    with pytest.raises(DefinitionError):
        parse_path(["a"], "where")


def test_parse_path_beyond_segment_limit_raises() -> None:
    assert len(parse_path(".".join("a" * 16), "f")) == 16
    with pytest.raises(DefinitionError):
        parse_path(".".join("a" * 17), "f")
    with pytest.raises(DefinitionError):
        parse_path("a.b.c", "f", max_segments=2)


def test_resolve_descends_objects_only_and_keeps_null_distinct_from_missing() -> None:
    payload = {"a": {"b": None}, "l": [{"x": 1}], "s": "text"}
    assert resolve(payload, ("a", "b")) is None
    assert resolve(payload, ("a", "c")) is MISSING
    assert resolve(payload, ("l", "x")) is MISSING
    assert resolve(payload, ("s", "x")) is MISSING
    assert resolve(payload, ("a",)) == {"b": None}
