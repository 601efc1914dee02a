"""The bounds of hostile input (DESIGN.md §10 "Hostile input"): one home for the numbers.

Owns the limits (durations, instant years, text, JSON depth, integers, nodes, templates and
messages: the ``MAX_*``/``MIN_*`` constants), :func:`bounded_text`, :func:`check_json` (a value in
memory, without recursion) and :func:`parse_json` (JSON text, same bounds); any breach is a
:class:`~pipeline.rules.errors.DefinitionError`. Leaves out what each field means and how a refusal
reaches the caller (the command processor's result, a dead letter)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pipeline.rules.errors import DefinitionError
from pipeline.rules.native import NATIVE

__all__ = [
    "MAX_DURATION",
    "MAX_INSTANT",
    "MAX_JSON_DEPTH",
    "MAX_JSON_INT",
    "MAX_JSON_NODES",
    "MAX_MESSAGE",
    "MAX_TEMPLATE",
    "MAX_TEMPLATE_FIELDS",
    "MAX_YEAR",
    "MIN_INSTANT",
    "MIN_YEAR",
    "SAFE_JSON_INT",
    "bounded_text",
    "check_instant",
    "check_json",
    "parse_json",
]

MAX_DURATION: Final = timedelta(days=3653)
"""Ten years (with their leap days): the longest duration or retention anything may name."""
MIN_YEAR: Final = 1970
MAX_YEAR: Final = 9999
MIN_INSTANT: Final = datetime(MIN_YEAR, 1, 1, tzinfo=UTC)
MAX_INSTANT: Final = datetime(MAX_YEAR, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
MAX_JSON_DEPTH: Final = 64
MAX_JSON_INT: Final = 2**63
SAFE_JSON_INT: Final = 2**53 - 1
"""What RFC 8785 can write exactly: the bound of every payload that is canonicalized."""
MAX_JSON_NODES: Final = 200_000
MAX_TEMPLATE: Final = 1_024
"""Characters of one ``delivery.message`` template."""
MAX_TEMPLATE_FIELDS: Final = 32
MAX_MESSAGE: Final = 4_096
"""Characters of a rendered message (Telegram's limit for one message); longer is cut."""
_MAX_INT_DIGITS: Final = 20  # len(str(2**63)) is 19; a sign makes 20
# 2^53 has 16 digits; a float overflows only with an exponent or 300-odd digits.
_RISKY: Final = re.compile(r"\d{16}|\d[eE]")


def bounded_text(value: object, field: str | None, limit: int, what: str = "text") -> str:
    """``value`` if it is a string of at most ``limit`` characters, else a refusal naming
    ``field``. Call it before any regular expression sees ``value``."""
    if not isinstance(value, str):
        raise DefinitionError(f"{what} must be a string, not {type(value).__name__}", field)
    if len(value) > limit:
        raise DefinitionError(f"{what} is longer than {limit} characters", field)
    return value


def check_instant(value: datetime, field: str | None = "instant") -> datetime:
    """``value`` (aware) if it lies in years 1970..9999, else a refusal naming ``field``."""
    if not MIN_INSTANT <= value <= MAX_INSTANT:
        raise DefinitionError(
            f"instant {value.isoformat()} is outside the years {MIN_YEAR}..{MAX_YEAR}", field
        )
    return value


def check_json(
    value: Any,
    field: str | None = None,
    *,
    max_depth: int = MAX_JSON_DEPTH,
    max_int: int = MAX_JSON_INT,
    max_nodes: int = MAX_JSON_NODES,
) -> Any:
    """``value`` if every nested value keeps the bounds, else a refusal naming ``field``.

    Objects (mappings with string keys) and arrays (lists, tuples) are descended without
    recursion; a scalar of another type (a YAML date) is left to the caller's own rules.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise DefinitionError(f"holds more than {max_nodes} JSON values", field)
        kind = type(node)
        if kind is int:
            if not -max_int <= node <= max_int:
                raise DefinitionError(f"an integer is larger than {max_int} in magnitude", field)
        elif kind is float:
            if not math.isfinite(node):
                raise DefinitionError("a number is not finite (NaN or infinity)", field)
        elif isinstance(node, Mapping | list | tuple):
            if depth > max_depth:
                raise DefinitionError(f"nested deeper than {max_depth} levels", field)
            if isinstance(node, Mapping):
                for key in node:
                    if not isinstance(key, str):
                        raise DefinitionError("an object key is not a string", field)
                stack.extend((child, depth + 1) for child in node.values())
            else:
                stack.extend((child, depth + 1) for child in node)
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _bounded_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"number {text[:40]} is not finite")
    return number


def parse_json(
    text: str | bytes,
    field: str | None = None,
    *,
    max_bytes: int,
    max_depth: int = MAX_JSON_DEPTH,
    max_int: int = MAX_JSON_INT,
) -> Any:
    """JSON text as a value within the bounds, else a refusal naming ``field``.

    Size is checked before parsing; ``NaN`` and infinities are refused while parsing, and so are
    over-long integers and overflowing floats in text that could hold them (a long digit run or
    an exponent: other text is parsed by the C decoder alone); depth is walked only when the
    text holds enough brackets to exceed it. On the native path, text in the plain subset
    (``native/src/json.rs``: short numbers, no surrogate escapes, within the depth and node
    bounds) is read there, to the same value; everything else is read here.
    """
    if len(text) > max_bytes:
        raise DefinitionError(f"JSON text is larger than {max_bytes} bytes", field)
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if NATIVE is not None:
            read = NATIVE.parse_json(text, max_depth, MAX_JSON_NODES)
            if read is not None:
                return read[0]
        if _RISKY.search(text) is None:
            value = _PLAIN.decode(text)
        else:
            value = _bounded_decoder(max_int).decode(text)
    except RecursionError:
        raise DefinitionError(f"JSON nested deeper than {max_depth} levels", field) from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError included
        raise DefinitionError(f"not JSON: {str(exc)[:200]}", field) from None
    if text.count("{") + text.count("[") > max_depth:
        check_json(value, field, max_depth=max_depth, max_int=max_int)
    return value


_PLAIN: Final = json.JSONDecoder(parse_constant=_refuse_constant)


def _bounded_decoder(max_int: int) -> json.JSONDecoder:
    """A decoder that also refuses integers beyond ``max_int`` and floats that overflow."""

    def bounded_int(digits: str) -> int:
        if len(digits) > _MAX_INT_DIGITS:
            raise ValueError(f"integer of {len(digits)} digits")
        number = int(digits)
        if not -max_int <= number <= max_int:
            raise ValueError(f"integer larger than {max_int} in magnitude")
        return number

    return json.JSONDecoder(
        parse_constant=_refuse_constant, parse_int=bounded_int, parse_float=_bounded_float
    )
