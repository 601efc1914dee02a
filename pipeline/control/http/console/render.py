"""How the console says things: its Jinja2 templates, and definitions in plain words.

Owns the autoescaped template environment (what a tenant or agent wrote is text, never markup),
:func:`condition_text`, :func:`source_text`, :func:`cadence_text`, :func:`proposal_words` and
:func:`leaves`; all total: an unexpected shape shows as compact JSON, never an error. Left out:
reading data and deciding who sees what (``pages``)."""

from __future__ import annotations

import json
from typing import Any, Final

from jinja2 import Environment, PackageLoader, Undefined, select_autoescape

__all__ = [
    "cadence_text",
    "condition_text",
    "environment",
    "leaves",
    "proposal_words",
    "source_text",
]

_COMPARE: Final = {"eq": "=", "ne": "≠", "lt": "<", "le": "≤", "gt": ">", "ge": "≥"}
_MAX_DEPTH: Final = 64


def _literal(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def condition_text(condition: Any, depth: int = 0) -> str:
    """``condition`` (DESIGN.md §9's grammar) in words; none (a schedule has none) as a dash;
    anything else as compact JSON."""
    if condition is None or isinstance(condition, Undefined):
        return "—"
    if depth > _MAX_DEPTH or not isinstance(condition, dict) or len(condition) != 1:
        return _literal(condition)
    ((op, arg),) = condition.items()
    if op in _COMPARE and isinstance(arg, list) and len(arg) == 2:
        return f"{arg[0]} {_COMPARE[op]} {_literal(arg[1])}"
    if op == "contains" and isinstance(arg, list) and len(arg) == 2:
        return f"{arg[0]} contains {_literal(arg[1])}"
    if op == "exists" and isinstance(arg, str):
        return f"{arg} exists"
    if op in ("all", "any") and isinstance(arg, list) and arg:
        joiner = " and " if op == "all" else " or "
        parts = [condition_text(part, depth + 1) for part in arg]
        inner = joiner.join(f"({p})" if (" and " in p or " or " in p) else p for p in parts)
        return inner
    if op == "not":
        return f"not ({condition_text(arg, depth + 1)})"
    return _literal(condition)


def source_text(source: Any) -> str:
    """Where a watcher looks, in words."""
    if not isinstance(source, dict):
        return _literal(source)
    kind = source.get("kind")
    if kind == "event":
        return f"events {source.get('event_type')} on {source.get('source_id')}"
    if kind == "polling":
        tool = source.get("tool")
        target = source.get("target") or source.get("tool_ref")
        return f"polls {tool} for {target} ({source.get('source_id')})"
    if kind == "schedule":
        return "a schedule"
    return _literal(source)


def cadence_text(source: Any) -> str:
    """How often a watcher looks: a cadence, a cron line, an instant, or on every event."""
    if not isinstance(source, dict):
        return "—"
    if source.get("cadence"):
        return f"every {source['cadence']}"
    if source.get("cron"):
        return f"cron {source['cron']} ({source.get('timezone', 'UTC')})"
    if source.get("at"):
        return f"once at {source['at']}"
    if source.get("kind") == "event":
        return "on each event"
    return "—"


def proposal_words(definition: dict[str, Any]) -> dict[str, str]:
    """What an agent asked for, in plain words."""
    delivery = definition.get("delivery") or {}
    terminal = definition.get("terminal_condition")
    return {
        "source": source_text(definition.get("source")),
        "condition": condition_text(definition.get("condition")),
        "terminal": "—" if terminal is None else condition_text(terminal),
        "window": str(definition.get("window") or definition.get("expires_at") or "—"),
        "cadence": cadence_text(definition.get("source")),
        "target": str(delivery.get("target", "—")),
        "purpose": str(definition.get("purpose", "—")),
    }


def leaves(payload: Any, limit: int = 50) -> list[tuple[str, str]]:
    """A receipt's allowlisted evidence as ``(dotted path, JSON value)`` pairs (at most
    ``limit``)."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[str, Any, int]] = [("", payload, 0)]
    while stack and len(out) < limit:
        path, value, depth = stack.pop()
        if isinstance(value, dict) and value and depth < _MAX_DEPTH:
            for key in sorted(value, reverse=True):
                stack.append((f"{path}.{key}" if path else str(key), value[key], depth + 1))
        elif path:
            out.append((path, value if isinstance(value, str) else _literal(value)))
    return out


def environment() -> Environment:
    """The console's templates, autoescaped, with the helpers above as filters."""
    env = Environment(
        loader=PackageLoader("pipeline.control.http.console", "templates"),
        autoescape=select_autoescape(("html",), default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["condition"] = condition_text
    env.filters["source"] = source_text
    env.filters["cadence"] = cadence_text
    env.filters["leaves"] = leaves
    env.filters["pretty"] = lambda value: json.dumps(value, indent=2, sort_keys=True)
    return env
