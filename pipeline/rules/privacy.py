"""The receipt privacy filter: only scalar leaves at allowlisted paths survive (DESIGN.md §3).

An object or list at a listed path keeps nothing (listing a parent never leaks its children) and
lists are never descended; kept leaves keep their nesting. Paths are ``pipeline.rules.paths``'.
Leaves out *whether* a payload is kept (evaluation decides) and encryption."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from pipeline.rules.paths import MISSING, Path, parse_path, resolve

__all__ = ["filter_payload", "keep_leaves", "parse_retain_paths"]

_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def parse_retain_paths(
    retain_paths: Iterable[str], field: str = "privacy.retain_paths"
) -> tuple[Path, ...]:
    """Validate an allowlist once (at creation); errors name the entry, e.g. ``[2]``."""
    return tuple(parse_path(text, f"{field}[{i}]") for i, text in enumerate(retain_paths))


def filter_payload(
    payload: Mapping[str, Any],
    retain_paths: Iterable[str],
    field: str = "privacy.retain_paths",
) -> dict[str, Any]:
    """A new dict holding only the scalar leaves of ``payload`` at exactly ``retain_paths``."""
    return keep_leaves(payload, parse_retain_paths(retain_paths, field))


def keep_leaves(payload: Mapping[str, Any], paths: Iterable[Path]) -> dict[str, Any]:
    """:func:`filter_payload` over paths parsed once (a definition keeps its own parsed)."""
    kept: dict[str, Any] = {}
    for path in paths:
        value = resolve(payload, path)
        if value is MISSING or type(value) not in _SCALARS:
            continue
        *parents, last = path
        node = kept
        for segment in parents:
            node = node.setdefault(segment, {})
        node[last] = value
    return kept
