"""The condition DSL (DESIGN.md §9): parsing, bounds, the immutable AST and the interpreter.

Owns the shape (``eq ne lt le gt ge contains exists all any not`` over ``pipeline.rules.paths``),
:class:`ConditionLimits` (checked while parsing, so a created definition never blows up evaluation),
:func:`interpret` (the reference semantics, spelled out there and shared with ``condition_compile``)
and :func:`condition_fingerprint`. Leaves out where a condition comes from (models) and what a
result means (evaluation)."""

from __future__ import annotations

import hashlib
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from pipeline.rules.errors import DefinitionError
from pipeline.rules.keys import canonical_json
from pipeline.rules.native import NATIVE
from pipeline.rules.paths import MISSING, Path, format_path, parse_path, resolve

__all__ = [
    "DEFAULT_LIMITS",
    "AllOf",
    "AnyOf",
    "Compare",
    "CompareOp",
    "Condition",
    "ConditionLimits",
    "Contains",
    "Exists",
    "LiteralKind",
    "Not",
    "Predicate",
    "Scalar",
    "compile_condition",
    "condition_fingerprint",
    "condition_paths",
    "condition_to_json",
    "interpret",
    "kind_of",
    "parse_condition",
]

Scalar = str | int | float | bool | None
Predicate = Callable[[Mapping[str, Any]], bool]
_MAX_SAFE_INT: Final = 2**53 - 1


class CompareOp(StrEnum):
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"


class LiteralKind(StrEnum):
    """The JSON type of a scalar; it decides which values a comparison can hold for."""

    STRING = "string"
    NUMBER = "number"
    BOOLEAN = "boolean"
    NULL = "null"


_KINDS: Final[dict[type, LiteralKind]] = {
    str: LiteralKind.STRING,
    int: LiteralKind.NUMBER,
    float: LiteralKind.NUMBER,
    bool: LiteralKind.BOOLEAN,
    type(None): LiteralKind.NULL,
}
_ORDERING: Final[dict[CompareOp, Callable[[Any, Any], bool]]] = {
    CompareOp.LT: operator.lt,
    CompareOp.LE: operator.le,
    CompareOp.GT: operator.gt,
    CompareOp.GE: operator.ge,
}
_ORDERABLE: Final = frozenset({LiteralKind.STRING, LiteralKind.NUMBER})


def kind_of(value: Any) -> LiteralKind | None:
    """The scalar kind of a JSON value, ``None`` for lists, objects and non-JSON values."""
    return _KINDS.get(type(value))


@dataclass(frozen=True, slots=True)
class ConditionLimits:
    """Bounds checked at creation (DESIGN.md §3: depth 8, fan-out 32)."""

    max_depth: int = 8
    max_fanout: int = 32
    max_path_segments: int = 16
    max_string_bytes: int = 1024
    max_nodes: int = 256


DEFAULT_LIMITS: Final = ConditionLimits()


@dataclass(frozen=True, slots=True)
class Compare:
    """``{op: [path, literal]}``. ``kind`` is derived, so ``true`` and ``1`` stay distinct."""

    op: CompareOp
    path: Path
    literal: Scalar
    kind: LiteralKind = field(init=False)

    def __post_init__(self) -> None:
        kind = kind_of(self.literal)
        if kind is None:
            raise DefinitionError(f"a literal is a scalar, not {type(self.literal).__name__}")
        if self.op in _ORDERING and kind not in _ORDERABLE:
            raise DefinitionError(f"{self.op} compares numbers or strings, not {kind}")
        object.__setattr__(self, "kind", kind)


@dataclass(frozen=True, slots=True)
class Contains:
    path: Path
    needle: str


@dataclass(frozen=True, slots=True)
class Exists:
    path: Path


@dataclass(frozen=True, slots=True)
class AllOf:
    children: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    children: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Not:
    child: Condition


Condition = Compare | Contains | Exists | AllOf | AnyOf | Not

_COMBINATORS: Final = ("all", "any", "not")
_OPERATORS: Final = (*_COMBINATORS, *(op.value for op in CompareOp), "contains", "exists")


class _Parser:
    """One parse: carries the limits and the running node count."""

    def __init__(self, limits: ConditionLimits) -> None:
        self.limits = limits
        self.nodes = 0

    def condition(self, raw: Any, where: str, depth: int) -> Condition:
        if depth > self.limits.max_depth:
            raise DefinitionError(f"nested deeper than {self.limits.max_depth} levels", where)
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise DefinitionError(f"more than {self.limits.max_nodes} condition nodes", where)
        if not isinstance(raw, Mapping) or len(raw) != 1:
            raise DefinitionError("a condition is an object with exactly one operator", where)
        ((name, arg),) = raw.items()
        if name not in _OPERATORS:
            raise DefinitionError(
                f"unknown operator {str(name)[:40]!r}; one of {', '.join(_OPERATORS)}", where
            )
        here = f"{where}.{name}"
        if name == "not":
            return Not(self.condition(arg, here, depth + 1))
        if name in ("all", "any"):
            children = tuple(
                self.condition(child, f"{here}[{i}]", depth + 1)
                for i, child in enumerate(self.children(arg, here))
            )
            return AllOf(children) if name == "all" else AnyOf(children)
        if name == "exists":
            return Exists(self.path(arg, here))
        path_raw, literal = self.pair(arg, here)
        path = self.path(path_raw, f"{here}[0]")
        if name == "contains":
            if type(literal) is not str:
                raise DefinitionError("contains takes a string literal", f"{here}[1]")
            return Contains(path, self.string(literal, f"{here}[1]"))
        op = CompareOp(name)
        return Compare(op, path, self.literal(op, literal, f"{here}[1]"))

    def children(self, arg: Any, where: str) -> list[Any]:
        if not isinstance(arg, list | tuple):
            raise DefinitionError("takes a list of conditions", where)
        if not arg:
            raise DefinitionError("takes at least one condition", where)
        if len(arg) > self.limits.max_fanout:
            raise DefinitionError(
                f"{len(arg)} conditions, at most {self.limits.max_fanout} allowed", where
            )
        return list(arg)

    @staticmethod
    def pair(arg: Any, where: str) -> tuple[Any, Any]:
        if not isinstance(arg, list | tuple) or len(arg) != 2:
            raise DefinitionError("takes [path, literal]", where)
        return arg[0], arg[1]

    def path(self, raw: Any, where: str) -> Path:
        if isinstance(raw, str):
            self.string(raw, where)
        return parse_path(raw, where, self.limits.max_path_segments)

    def string(self, text: str, where: str) -> str:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise DefinitionError("string is not valid Unicode", where) from exc
        if size > self.limits.max_string_bytes:
            raise DefinitionError(
                f"{size} bytes, at most {self.limits.max_string_bytes} allowed", where
            )
        return text

    def literal(self, op: CompareOp, raw: Any, where: str) -> Scalar:
        kind = kind_of(raw)
        if kind is None:
            raise DefinitionError("a literal is a string, number, boolean or null", where)
        if op in _ORDERING and kind not in _ORDERABLE:
            raise DefinitionError(f"{op} compares numbers or strings, not {kind}", where)
        if kind is LiteralKind.STRING:
            return self.string(raw, where)
        if type(raw) is int and not -_MAX_SAFE_INT <= raw <= _MAX_SAFE_INT:
            raise DefinitionError("integer outside ±(2^53 - 1)", where)
        if type(raw) is float and not math.isfinite(raw):
            raise DefinitionError("NaN and infinities are not literals", where)
        scalar: Scalar = raw
        return scalar


def parse_condition(
    raw: Any, limits: ConditionLimits = DEFAULT_LIMITS, field: str = "condition"
) -> Condition:
    """Validate JSON-shaped ``raw`` into a Condition; errors name the place, e.g.
    ``condition.all[1].eq[0]``. Never raises anything but DefinitionError."""
    return _Parser(limits).condition(raw, field, 1)


def condition_to_json(cond: Condition) -> Any:
    """The JSON shape of ``cond``; ``parse_condition`` of it gives ``cond`` back."""
    match cond:
        case Compare(op=op, path=path, literal=literal):
            return {op.value: [format_path(path), literal]}
        case Contains(path=path, needle=needle):
            return {"contains": [format_path(path), needle]}
        case Exists(path=path):
            return {"exists": format_path(path)}
        case AllOf(children=children):
            return {"all": [condition_to_json(child) for child in children]}
        case AnyOf(children=children):
            return {"any": [condition_to_json(child) for child in children]}
        case Not(child=child):
            return {"not": condition_to_json(child)}


def condition_fingerprint(cond: Condition) -> str:
    """Hex SHA-256 of the canonical JSON: equal conditions (``1`` and ``1.0`` alike) match; the
    children of ``all``/``any`` are not reordered."""
    return hashlib.sha256(canonical_json(condition_to_json(cond), "condition")).hexdigest()


def condition_paths(cond: Condition) -> frozenset[str]:
    """Every dotted path the condition reads."""
    match cond:
        case Compare(path=path) | Contains(path=path) | Exists(path=path):
            return frozenset({format_path(path)})
        case AllOf(children=children) | AnyOf(children=children):
            return frozenset().union(*(condition_paths(child) for child in children))
        case Not(child=child):
            return condition_paths(child)


def _equal(value: Any, literal: Scalar, kind: LiteralKind) -> bool:
    return kind_of(value) is kind and value == literal


def _compare(cond: Compare, value: Any) -> bool:
    if value is MISSING:
        return False
    if cond.op is CompareOp.EQ:
        return _equal(value, cond.literal, cond.kind)
    if cond.op is CompareOp.NE:
        return not _equal(value, cond.literal, cond.kind)
    if kind_of(value) is not cond.kind:
        return False
    return _ORDERING[cond.op](value, cond.literal)


def compile_condition(cond: Condition) -> Predicate:
    """``cond`` as a fast predicate, compiled once per version: ``vigil_native.Condition`` on
    the native path (``pipeline.rules.native``), else closures (``condition_compile``)."""
    if NATIVE is not None:
        predicate: Predicate = NATIVE.Condition(condition_to_json(cond))
        return predicate
    from pipeline.rules.condition_compile import compile_tree  # the compiler imports the AST

    return compile_tree(cond)


def interpret(cond: Condition, payload: Mapping[str, Any]) -> bool:
    """The plain reference semantics; ``compile_condition`` must agree with it everywhere.

    - Payload values are plain JSON values as ``json.loads`` makes them; a value's JSON type is
      its exact Python type (``bool`` is never a number, a ``str`` subclass is not a string).
    - A path that does not resolve makes every comparison false, ``ne`` included (``ne`` means
      "present and different"; ``not eq`` is true on a missing path). ``exists`` is true iff the
      path resolves; a ``null`` value exists.
    - ``eq``/``ne`` are strict, with no coercion: ``1`` never equals ``"1"`` or ``true``; ints and
      floats compare numerically (``1 == 1.0``). A ``null`` literal matches only a ``null``
      value. A list or object value equals no literal.
    - ``lt le gt ge`` hold only number against number or string against string (code-point
      order); any other pairing is false.
    - ``contains`` holds only for a string value containing the literal substring.
    - Literals are scalars: strings, booleans, ``null``, integers within ±(2^53 - 1), finite
      floats.
    """
    match cond:
        case Compare(path=path):
            return _compare(cond, resolve(payload, path))
        case Contains(path=path, needle=needle):
            value = resolve(payload, path)
            return type(value) is str and needle in value
        case Exists(path=path):
            return resolve(payload, path) is not MISSING
        case AllOf(children=children):
            return all(interpret(child, payload) for child in children)
        case AnyOf(children=children):
            return any(interpret(child, payload) for child in children)
        case Not(child=child):
            return not interpret(child, payload)
