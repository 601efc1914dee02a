"""The condition DSL: shape and bounds, the semantics table, compiler/interpreter agreement."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rules.condition import (
    DEFAULT_LIMITS,
    AllOf,
    AnyOf,
    Compare,
    CompareOp,
    Condition,
    ConditionLimits,
    Contains,
    Exists,
    Not,
    compile_condition,
    condition_fingerprint,
    condition_paths,
    condition_to_json,
    interpret,
    parse_condition,
)
from pipeline.rules.errors import DefinitionError

pytestmark = pytest.mark.unit

PAYLOAD: dict[str, Any] = {
    "s": "failed",
    "i": 1,
    "f": 1.0,
    "half": 0.5,
    "t": True,
    "z": False,
    "n": None,
    "one": "1",
    "lst": ["a", 1],
    "obj": {"inner": "x", "deep": {"k": 3}},
    "branch": "release/1.2",
}

# (condition, expected) over PAYLOAD; each row runs through both the interpreter and the compiler.
SEMANTICS: list[tuple[Any, bool]] = [
    # eq/ne: strict, no coercion; ints and floats compare numerically
    ({"eq": ["s", "failed"]}, True),
    ({"eq": ["i", 1]}, True),
    ({"eq": ["i", 1.0]}, True),
    ({"eq": ["f", 1]}, True),
    ({"eq": ["one", 1]}, False),
    ({"eq": ["i", "1"]}, False),
    ({"eq": ["t", 1]}, False),
    ({"eq": ["i", True]}, False),
    ({"eq": ["z", 0]}, False),
    ({"eq": ["t", True]}, True),
    ({"eq": ["z", False]}, True),
    ({"eq": ["n", None]}, True),
    ({"eq": ["z", None]}, False),
    ({"eq": ["lst", "a"]}, False),
    ({"eq": ["obj", "x"]}, False),
    ({"ne": ["s", "ok"]}, True),
    ({"ne": ["s", "failed"]}, False),
    ({"ne": ["one", 1]}, True),
    ({"ne": ["t", 1]}, True),
    ({"ne": ["i", 1.0]}, False),
    ({"ne": ["n", None]}, False),
    ({"ne": ["s", None]}, True),
    ({"ne": ["lst", "a"]}, True),
    # a missing path makes every comparison false, ne included; not(eq) is true there
    ({"eq": ["missing", "x"]}, False),
    ({"ne": ["missing", "x"]}, False),
    ({"ne": ["missing", None]}, False),
    ({"not": {"eq": ["missing", "x"]}}, True),
    ({"lt": ["missing", 5]}, False),
    ({"contains": ["missing", ""]}, False),
    ({"eq": ["s.deeper", "x"]}, False),
    ({"eq": ["lst.a", "a"]}, False),
    # ordering: number vs number, string vs string (code points), anything else false
    ({"lt": ["half", 1]}, True),
    ({"le": ["i", 1.0]}, True),
    ({"gt": ["i", 0.5]}, True),
    ({"ge": ["f", 2]}, False),
    ({"lt": ["s", "g"]}, True),
    ({"gt": ["s", "Z"]}, True),
    ({"lt": ["one", 2]}, False),
    ({"gt": ["i", "0"]}, False),
    ({"gt": ["t", 0]}, False),
    ({"ge": ["z", 0]}, False),
    ({"lt": ["n", 1]}, False),
    ({"lt": ["lst", 5]}, False),
    # contains: strings only
    ({"contains": ["branch", "release/"]}, True),
    ({"contains": ["branch", "main"]}, False),
    ({"contains": ["lst", "a"]}, False),
    ({"contains": ["i", "1"]}, False),
    ({"contains": ["s", ""]}, True),
    # exists: the path resolves; null exists; lists are not descended
    ({"exists": "n"}, True),
    ({"exists": "obj.deep.k"}, True),
    ({"exists": "obj.deep.missing"}, False),
    ({"exists": "missing"}, False),
    ({"exists": "s.length"}, False),
    ({"exists": "lst.a"}, False),
    # nested paths and combinators
    ({"eq": ["obj.inner", "x"]}, True),
    ({"ge": ["obj.deep.k", 3]}, True),
    ({"all": [{"eq": ["s", "failed"]}, {"exists": "obj.deep"}]}, True),
    ({"all": [{"eq": ["s", "failed"]}, {"exists": "nope"}]}, False),
    ({"any": [{"eq": ["s", "ok"]}, {"eq": ["i", 1]}]}, True),
    ({"any": [{"eq": ["s", "ok"]}, {"eq": ["i", 2]}, {"exists": "nope"}]}, False),
    ({"all": [{"eq": ["i", 1]}, {"eq": ["f", 1]}, {"eq": ["t", True]}]}, True),
    ({"not": {"all": [{"eq": ["i", 1]}]}}, False),
]


@pytest.mark.parametrize(("raw", "expected"), SEMANTICS, ids=lambda x: str(x))
def test_condition_semantics_hold_in_interpreter_and_compiler(raw: Any, expected: bool) -> None:
    cond = parse_condition(raw)
    assert interpret(cond, PAYLOAD) is expected
    assert compile_condition(cond)(PAYLOAD) is expected


def test_parse_condition_builds_immutable_ast() -> None:
    cond = parse_condition({"all": [{"eq": ["commit.sha", "abc"]}, {"not": {"exists": "x"}}]})
    assert cond == AllOf((Compare(CompareOp.EQ, ("commit", "sha"), "abc"), Not(Exists(("x",)))))
    with pytest.raises(AttributeError):
        cond.children = ()  # type: ignore[misc]


def test_compare_keeps_bool_and_number_literals_distinct() -> None:
    assert Compare(CompareOp.EQ, ("a",), True) != Compare(CompareOp.EQ, ("a",), 1)
    assert Compare(CompareOp.EQ, ("a",), 1) == Compare(CompareOp.EQ, ("a",), 1.0)


def test_fingerprint_matches_for_equal_conditions_and_differs_otherwise() -> None:
    first = condition_fingerprint(parse_condition({"eq": ["a", 1]}))
    assert first == condition_fingerprint(parse_condition({"eq": ["a", 1.0]}))
    assert first != condition_fingerprint(parse_condition({"eq": ["a", True]}))
    assert first != condition_fingerprint(parse_condition({"eq": ["a", "1"]}))
    assert first != condition_fingerprint(parse_condition({"ne": ["a", 1]}))
    assert len(first) == 64 and int(first, 16) >= 0


def test_condition_paths_lists_every_path_read() -> None:
    cond = parse_condition(
        {"any": [{"eq": ["a.b", 1]}, {"not": {"exists": "c"}}, {"contains": ["a.b", "x"]}]}
    )
    assert condition_paths(cond) == frozenset({"a.b", "c"})


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"all": [{"eq": ["ok", 1]}, {"eq": ["bad path", 1]}]}, "condition.all[1].eq[0]"),
        ({"any": [{"exists": "a..b"}]}, "condition.any[0].exists"),
        ({"not": {"eq": ["a", [1]]}}, "condition.not.eq[1]"),
        ({"eq": ["a"]}, "condition.eq"),
        ({"eq": "a"}, "condition.eq"),
        ({"regex": ["a", ".*"]}, "condition"),
        ({"eq": ["a", 1], "ne": ["a", 2]}, "condition"),
        ({}, "condition"),
        ("eq", "condition"),
        ({"all": []}, "condition.all"),
        ({"all": {"eq": ["a", 1]}}, "condition.all"),
        ({"contains": ["a", 1]}, "condition.contains[1]"),
        ({"lt": ["a", None]}, "condition.lt[1]"),
        ({"ge": ["a", True]}, "condition.ge[1]"),
        ({"eq": ["a", math.nan]}, "condition.eq[1]"),
        ({"eq": ["a", math.inf]}, "condition.eq[1]"),
        ({"eq": ["a", 2**53]}, "condition.eq[1]"),
        ({"eq": ["a", {"x": 1}]}, "condition.eq[1]"),
        ({"eq": ["1a", 1]}, "condition.eq[0]"),
        ({"eq": ["ä", 1]}, "condition.eq[0]"),
        ({"exists": 3}, "condition.exists"),
        ({"eq": ["a", "\ud800"]}, "condition.eq[1]"),
    ],
    ids=lambda x: str(x),
)
def test_parse_condition_of_invalid_shape_raises_naming_the_field(raw: Any, field: str) -> None:
    with pytest.raises(DefinitionError) as info:
        parse_condition(raw)
    assert info.value.field == field


def _nested(depth: int) -> Any:
    raw: Any = {"exists": "a"}
    for _ in range(depth - 1):
        raw = {"not": raw}
    return raw


def test_depth_at_limit_parses_and_one_deeper_raises() -> None:
    cond = parse_condition(_nested(DEFAULT_LIMITS.max_depth))
    assert interpret(cond, {"a": 1}) is False  # seven negations of a true leaf
    with pytest.raises(DefinitionError) as info:
        parse_condition(_nested(DEFAULT_LIMITS.max_depth + 1))
    assert info.value.field == "condition" + ".not" * DEFAULT_LIMITS.max_depth
    assert "deeper than 8" in info.value.message


def test_fanout_at_limit_parses_and_one_more_raises() -> None:
    leaves = [{"eq": ["a", i]} for i in range(DEFAULT_LIMITS.max_fanout + 1)]
    assert parse_condition({"any": leaves[:-1]})
    with pytest.raises(DefinitionError) as info:
        parse_condition({"any": leaves})
    assert info.value.field == "condition.any"


def test_total_nodes_beyond_limit_raises() -> None:
    limits = ConditionLimits(max_nodes=4)
    assert parse_condition({"all": [{"exists": "a"}] * 3}, limits)
    with pytest.raises(DefinitionError) as info:
        parse_condition({"all": [{"exists": "a"}] * 4}, limits)
    assert info.value.field == "condition.all[3]"


def test_path_segments_at_limit_parse_and_one_more_raises() -> None:
    path = ".".join(["s"] * DEFAULT_LIMITS.max_path_segments)
    assert parse_condition({"exists": path})
    with pytest.raises(DefinitionError) as info:
        parse_condition({"exists": path + ".s"})
    assert info.value.field == "condition.exists"


def test_string_literal_bytes_at_limit_parse_and_one_more_raises() -> None:
    at_limit = "ü" * (DEFAULT_LIMITS.max_string_bytes // 2)
    assert parse_condition({"eq": ["a", at_limit]})
    with pytest.raises(DefinitionError) as info:
        parse_condition({"contains": ["a", at_limit + "x"]})
    assert info.value.field == "condition.contains[1]"


def test_custom_field_prefix_appears_in_errors() -> None:
    with pytest.raises(DefinitionError) as info:
        parse_condition({"not": {"exists": ""}}, field="terminal_condition")
    assert info.value.field == "terminal_condition.not.exists"


def test_compare_built_directly_rejects_non_scalar_or_unorderable_literal() -> None:
    with pytest.raises(DefinitionError):
        Compare(CompareOp.EQ, ("a",), [1])  # type: ignore[arg-type]
    with pytest.raises(DefinitionError):
        Compare(CompareOp.LT, ("a",), None)


# --- property tests --------------------------------------------------------------------------

_GENEROUS = ConditionLimits(max_depth=64, max_nodes=10_000)
_SEGMENTS = st.sampled_from(["a", "b", "c"])
# Mostly one- and two-segment paths over a tiny vocabulary, and literals drawn from the same
# small domain as payload values, so conditions often hit, and often hit the wrong type.
_PATHS = st.lists(_SEGMENTS, min_size=1, max_size=3).map(".".join) | _SEGMENTS
_STRINGS = st.sampled_from(["", "a", "ab", "b", "1", "A"])
_NUMBERS = st.sampled_from([0, 1, 2, -1, 0.0, 0.5, 1.0, -1.5, 2**53 - 1])
_SCALARS = _STRINGS | _NUMBERS | st.booleans() | st.none()
_ORDERABLE = _STRINGS | _NUMBERS

_LEAVES = st.one_of(
    st.tuples(st.sampled_from(["eq", "ne"]), _PATHS, _SCALARS).map(lambda t: {t[0]: [t[1], t[2]]}),
    st.tuples(st.sampled_from(["lt", "le", "gt", "ge"]), _PATHS, _ORDERABLE).map(
        lambda t: {t[0]: [t[1], t[2]]}
    ),
    st.tuples(_PATHS, _STRINGS).map(lambda t: {"contains": [t[0], t[1]]}),
    _PATHS.map(lambda p: {"exists": p}),
)
_CONDITIONS = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=4).map(lambda cs: {"all": cs}),
        st.lists(inner, min_size=1, max_size=4).map(lambda cs: {"any": cs}),
        inner.map(lambda c: {"not": c}),
    ),
    max_leaves=12,
)
_VALUES = st.recursive(
    _SCALARS | st.lists(_SCALARS, max_size=2),
    lambda inner: st.dictionaries(_SEGMENTS, inner, max_size=3),
    max_leaves=8,
)
_PAYLOADS = st.dictionaries(_SEGMENTS, _VALUES, min_size=1, max_size=3)

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=5)
    | st.sampled_from(["eq", "all", "not", "exists", "a.b", "contains"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["eq", "ne", "lt", "all", "any", "not", "exists", "contains", "x"])
            | st.text(max_size=3),
            inner,
            max_size=2,
        )
    ),
    max_leaves=20,
)


def _subconditions(cond: Condition) -> list[Condition]:
    """Every node, so a combinator above cannot mask a disagreement in a leaf."""
    match cond:
        case AllOf(children=children) | AnyOf(children=children):
            return [cond, *(sub for child in children for sub in _subconditions(child))]
        case Not(child=child):
            return [cond, *_subconditions(child)]
    return [cond]


def _confusables(literal: Any) -> list[Any]:
    """The literal itself and the values a coercing implementation would mix it up with."""
    near: list[Any] = [literal, str(literal), [literal], {"a": literal}]
    if isinstance(literal, int | float) and not isinstance(literal, bool):
        near += [int(literal), float(literal), bool(literal), literal + 1, literal - 0.5]
    if isinstance(literal, str):
        near += [literal + "x", "x" + literal, literal[:-1]]
    return near


@settings(max_examples=200)
@given(raw=_CONDITIONS, payload=_PAYLOADS)
def test_compiled_and_interpreted_agree_on_arbitrary_conditions(
    raw: Any, payload: dict[str, Any]
) -> None:
    cond = parse_condition(raw, _GENEROUS)
    for sub in _subconditions(cond):
        assert compile_condition(sub)(payload) is interpret(sub, payload), sub


@settings(max_examples=200)
@given(raw=_CONDITIONS, data=st.data())
def test_compiled_and_interpreted_agree_on_payloads_built_from_the_condition(
    raw: Any, data: st.DataObject
) -> None:
    """Values placed at the condition's own paths, so most leaves see a value of some type."""
    cond = parse_condition(raw, _GENEROUS)
    literals = [
        value
        for sub in _subconditions(cond)
        if isinstance(sub, Compare | Contains)
        for value in _confusables(sub.literal if isinstance(sub, Compare) else sub.needle)
    ]
    values = _VALUES | st.sampled_from(literals) if literals else _VALUES
    payload: dict[str, Any] = {}
    for path in sorted(condition_paths(cond)):
        *parents, last = path.split(".")
        node: Any = payload
        for segment in parents:
            node = node.setdefault(segment, {}) if isinstance(node, dict) else None
        if isinstance(node, dict) and data.draw(st.booleans()):
            node[last] = data.draw(values)
    for sub in _subconditions(cond):
        assert compile_condition(sub)(payload) is interpret(sub, payload), sub


@given(raw=_CONDITIONS)
def test_condition_to_json_round_trips_through_parse(raw: Any) -> None:
    cond = parse_condition(raw, _GENEROUS)
    assert parse_condition(condition_to_json(cond), _GENEROUS) == cond
    assert condition_fingerprint(parse_condition(condition_to_json(cond), _GENEROUS)) == (
        condition_fingerprint(cond)
    )


_LEAF_LITERALS: list[Any] = ["", "a", "ab", "1", 0, 1, 2, -1, 0.5, 1.0, True, False, None]
_LEAF_VALUES: list[Any] = [*_LEAF_LITERALS, "b", "xabx", 3, -0.5, 2**53 - 1, [], ["a"], {}]


def test_compiled_and_interpreted_agree_on_every_leaf_literal_value_and_path_shape() -> None:
    """Exhaustive over a small domain: every operator, literal, value type and path shape
    (value at the path, value where an object should be, path missing)."""
    checked = 0
    for op in [*CompareOp, "contains", "exists"]:
        for literal in _LEAF_LITERALS:
            raw = {op: "a.b"} if op == "exists" else {op: ["a.b", literal]}
            try:
                leaf = parse_condition(raw)
            except DefinitionError:
                continue  # e.g. lt with a boolean literal, contains with a number
            predicate = compile_condition(leaf)
            for value in _LEAF_VALUES:
                for payload in ({"a": {"b": value}}, {"a": value}, {"b": value}):
                    assert predicate(payload) is interpret(leaf, payload), (raw, payload)
                    top = parse_condition({op: "b"} if op == "exists" else {op: ["b", literal]})
                    assert compile_condition(top)(payload) is interpret(top, payload)
                    checked += 1
    assert checked > 3000


@settings(max_examples=200)
@given(raw=_JSON)
def test_parse_condition_of_arbitrary_json_raises_only_definition_error(raw: Any) -> None:
    try:
        parse_condition(raw)
    except DefinitionError as exc:
        assert exc.field is not None and exc.field.startswith("condition")
