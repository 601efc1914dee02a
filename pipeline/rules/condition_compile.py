"""The condition compiler: a Condition turned once into nested closures.

Same semantics as :func:`pipeline.rules.condition.interpret` (its docstring is the rule book),
faster; Hypothesis tests hold the two to agreement. Leaves out parsing and bounds
(``pipeline.rules.condition``) and caching compiled predicates per definition version (the
evaluator)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, Final

from pipeline.rules.condition import (
    AllOf,
    AnyOf,
    Compare,
    CompareOp,
    Condition,
    Contains,
    Exists,
    LiteralKind,
    Not,
    Predicate,
)
from pipeline.rules.paths import MISSING

__all__ = ["compile_tree"]

_NUMBERS: Final = frozenset({int, float})
_ORDER: Final[dict[CompareOp, Callable[[Any, Any], bool]]] = {
    CompareOp.LT: operator.lt,
    CompareOp.LE: operator.le,
    CompareOp.GT: operator.gt,
    CompareOp.GE: operator.ge,
}


def compile_tree(cond: Condition) -> Predicate:
    """A predicate over payloads that agrees with ``interpret(cond, payload)``."""
    match cond:
        case Compare() | Contains() | Exists():
            return _leaf(cond)
        case AllOf(children=children):
            return _all(tuple(compile_tree(child) for child in children))
        case AnyOf(children=children):
            return _any(tuple(compile_tree(child) for child in children))
        case Not(child=child):
            inner = compile_tree(child)
            return lambda payload: not inner(payload)


def _all(preds: tuple[Predicate, ...]) -> Predicate:
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        first, second = preds
        return lambda payload: first(payload) and second(payload)

    def every(payload: Mapping[str, Any]) -> bool:
        # A plain loop: all() over a generator costs a frame per call on this hot path.
        for pred in preds:  # noqa: SIM110
            if not pred(payload):
                return False
        return True

    return every


def _any(preds: tuple[Predicate, ...]) -> Predicate:
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        first, second = preds
        return lambda payload: first(payload) or second(payload)

    def some(payload: Mapping[str, Any]) -> bool:
        for pred in preds:  # noqa: SIM110
            if pred(payload):
                return True
        return False

    return some


def _leaf(cond: Compare | Contains | Exists) -> Predicate:
    """Every leaf is false on a path that does not resolve, so a multi-segment path walks to
    the parent object and applies the one-segment predicate of the last segment to it."""
    *parents, last = cond.path
    on_parent = _top_level(last, cond)
    if not parents:
        return on_parent
    if len(parents) == 1:
        (first,) = parents

        def under_one(payload: Mapping[str, Any]) -> bool:
            parent = payload.get(first, MISSING)
            return (parent.__class__ is dict or isinstance(parent, Mapping)) and on_parent(parent)

        return under_one

    def under_many(payload: Mapping[str, Any]) -> bool:
        parent: Any = payload
        for segment in parents:
            parent = parent.get(segment, MISSING)
            if parent.__class__ is not dict and not isinstance(parent, Mapping):
                return False
        return on_parent(parent)

    return under_many


def _top_level(key: str, cond: Compare | Contains | Exists) -> Predicate:
    """One-segment paths, the common case: the value test inlined after a single ``get``."""
    match cond:
        case Exists():
            return lambda payload: key in payload
        case Contains(needle=needle):
            return lambda p: (v := p.get(key, MISSING)).__class__ is str and needle in v
        case Compare(op=CompareOp.EQ, literal=lit, kind=LiteralKind.STRING):
            return lambda p: (v := p.get(key, MISSING)).__class__ is str and v == lit
        case Compare(op=CompareOp.EQ, literal=lit, kind=LiteralKind.NUMBER):
            return lambda p: (v := p.get(key, MISSING)).__class__ in _NUMBERS and v == lit
        case Compare(op=CompareOp.EQ, literal=lit):
            return lambda p: p.get(key, MISSING) is lit
        case Compare(op=CompareOp.NE, literal=lit, kind=LiteralKind.STRING):
            return lambda p: (
                (v := p.get(key, MISSING)) is not MISSING and (v.__class__ is not str or v != lit)
            )
        case Compare(op=CompareOp.NE, literal=lit, kind=LiteralKind.NUMBER):
            return lambda p: (
                (v := p.get(key, MISSING)) is not MISSING
                and (v.__class__ not in _NUMBERS or v != lit)
            )
        case Compare(op=CompareOp.NE, literal=lit):
            return lambda p: (v := p.get(key, MISSING)) is not MISSING and v is not lit
        case Compare(op=op, literal=lit, kind=LiteralKind.NUMBER):
            order = _ORDER[op]
            return lambda p: (v := p.get(key, MISSING)).__class__ in _NUMBERS and order(v, lit)
        case Compare(op=op, literal=lit):
            order = _ORDER[op]
            return lambda p: (v := p.get(key, MISSING)).__class__ is str and order(v, lit)
