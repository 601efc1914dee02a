"""The JSON Schema of a watcher definition, generated from :class:`WatcherDefinition`.

Owns :func:`watcher_schema` (``vigil schema watcher``, ``docs/schemas/watcher.json``) and
:func:`field_schemas` (references inlined, for the HTTP API's OpenAPI document), correcting what
pydantic cannot know: vigil's durations, the recursive condition DSL, caller-supplied and assigned
fields. A schema describes the shape; the rules still decide. Left out: events
(``pipeline.ops.json_schema``)."""

from __future__ import annotations

import copy
import re
from datetime import timedelta
from functools import cache
from typing import Any, Final

from pipeline.rules.condition import DEFAULT_LIMITS, CompareOp
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.durations import format_duration

__all__ = ["DURATION_SCHEMA", "condition_schema", "field_schemas", "watcher_schema"]

DURATION_SCHEMA: Final[dict[str, Any]] = {
    "type": "string",
    "pattern": r"^(?=\d)(\d{1,9}d)?(\d{1,9}h)?(\d{1,9}m)?(\d{1,9}s)?$",
    "maxLength": 32,
    "description": "A duration: units d h m s, each at most once, in that order (45s, 1h30m).",
    "examples": ["10m", "1h30m", "7d"],
}
_PATH: Final[dict[str, Any]] = {
    "type": "string",
    "pattern": r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
    "maxLength": DEFAULT_LIMITS.max_string_bytes,
    "description": "A dotted payload path (commit.sha).",
}
_SCALAR: Final[dict[str, Any]] = {"type": ["string", "number", "boolean", "null"]}
_ORDERED: Final[dict[str, Any]] = {"type": ["string", "number"]}
_SUBJECT_FIELDS: Final = ("tenant_id", "user_id")
_DESCRIPTION: Final = (
    "A vigil watcher definition (docs/definitions.md). The subject comes from the caller; the "
    "version is assigned when the command processor accepts it."
)


def condition_schema(child: dict[str, Any]) -> dict[str, Any]:
    """The condition DSL: exactly one operator per object; ``child`` is what a nested condition
    is (a ``$ref`` for the recursive schema, a plain object for a shallow one)."""
    pair = {"type": "array", "minItems": 2, "maxItems": 2, "prefixItems": []}
    operators: dict[str, Any] = {}
    for op in CompareOp:
        literal = _SCALAR if op in (CompareOp.EQ, CompareOp.NE) else _ORDERED
        operators[op.value] = {**pair, "prefixItems": [_PATH, literal]}
    operators["contains"] = {**pair, "prefixItems": [_PATH, {"type": "string"}]}
    operators["exists"] = _PATH
    children = {"type": "array", "minItems": 1, "maxItems": DEFAULT_LIMITS.max_fanout}
    operators["all"] = {**children, "items": child}
    operators["any"] = {**children, "items": child}
    operators["not"] = child
    return {
        "type": "object",
        "description": "One operator: eq ne lt le gt ge contains exists all any not "
        "(docs/definitions.md#conditions).",
        "minProperties": 1,
        "maxProperties": 1,
        "additionalProperties": False,
        "properties": operators,
    }


@cache
def _generated() -> dict[str, Any]:
    schema = WatcherDefinition.model_json_schema()
    _fix(schema)
    defs = schema.setdefault("$defs", {})
    defs["Condition"] = condition_schema({"$ref": "#/$defs/Condition"})
    for name in ("condition", "terminal_condition"):
        schema["properties"][name] = {"$ref": "#/$defs/Condition"}
    for name in _SUBJECT_FIELDS:
        schema["properties"][name]["description"] = "Optional: the caller's subject."
    schema["properties"].pop("version")
    schema["properties"]["watcher_id"]["description"] = (
        "Required to create; a proposal without one gets one."
    )
    optional = (*_SUBJECT_FIELDS, "watcher_id")
    schema["required"] = [r for r in schema["required"] if r not in optional]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "WatcherDefinition",
        "description": _DESCRIPTION,
        **{k: v for k, v in schema.items() if k != "title"},
    }


def watcher_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of a definition as users write it."""
    return copy.deepcopy(_generated())


def field_schemas() -> dict[str, dict[str, Any]]:
    """Each top-level field's schema with every ``$ref`` inlined; a condition's children are
    described as objects (OpenAPI components cannot carry the recursive ``$defs``)."""
    schema = watcher_schema()
    defs = schema.pop("$defs")
    defs["Condition"] = condition_schema({"type": "object"})
    return {name: _unwrap(_inline(value, defs)) for name, value in schema["properties"].items()}


def _unwrap(node: dict[str, Any]) -> dict[str, Any]:
    """A field's schema without its "or null" (the API body says optional itself), its title
    and its default."""
    alternatives = node.get("anyOf")
    if isinstance(alternatives, list):
        kept = [a for a in alternatives if a != {"type": "null"}]
        if len(kept) == 1:
            node = {**{k: v for k, v in node.items() if k != "anyOf"}, **kept[0]}
    return {k: v for k, v in node.items() if k not in ("title", "default")}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return {**_inline(defs[ref.removeprefix("#/$defs/")], defs), **rest}
        return {k: _inline(v, defs) for k, v in node.items() if k != "discriminator"}
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node


_ISO: Final = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?")


def _from_iso(text: str) -> str:
    """pydantic writes a default ``timedelta`` as ISO 8601 (``PT5S``); vigil writes ``5s``."""
    match = _ISO.fullmatch(text)
    if match is None:
        return text
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    total = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    return format_duration(total) if total > timedelta(0) else text


def _fix(node: Any) -> None:
    """In place: vigil's durations, and no docstring prose (it is written for developers)."""
    if isinstance(node, dict):
        if node.get("format") == "duration":
            node.pop("format")
            node.update(DURATION_SCHEMA)
            if isinstance(node.get("default"), str):
                node["default"] = _from_iso(node["default"])
        if isinstance(node.get("description"), str) and "``" in node["description"]:
            node.pop("description")
        for value in node.values():
            _fix(value)
    elif isinstance(node, list):
        for item in node:
            _fix(item)
