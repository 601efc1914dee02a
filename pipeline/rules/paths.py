"""Dotted payload paths: the one grammar shared by conditions and the privacy filter.

A path is ``segment(.segment)*``, each ``[A-Za-z_][A-Za-z0-9_]*`` (ASCII: no index, wildcard or
expression), at most ``max_segments``; it descends through JSON objects only, anything else means it
does not resolve. What a resolved value means is ``pipeline.rules.condition``'s and
``pipeline.rules.privacy``'s."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from pipeline.rules.errors import DefinitionError

__all__ = [
    "MAX_PATH_SEGMENTS",
    "MISSING",
    "Path",
    "format_path",
    "parse_path",
    "resolve",
]

Path = tuple[str, ...]
"""A validated path, split into its segments."""

MAX_PATH_SEGMENTS: Final = 16

_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class _Missing:
    """The value of a path that does not resolve (distinct from a JSON ``null``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def parse_path(text: object, field: str, max_segments: int = MAX_PATH_SEGMENTS) -> Path:
    """Validate a dotted path; ``field`` names where it came from in errors."""
    if not isinstance(text, str):
        raise DefinitionError(f"a path is a dotted string, not {type(text).__name__}", field)
    if _PATH.fullmatch(text) is None:
        raise DefinitionError(
            f"invalid path {text[:80]!r}: dotted segments of [A-Za-z_][A-Za-z0-9_]*", field
        )
    segments = tuple(text.split("."))
    if len(segments) > max_segments:
        raise DefinitionError(
            f"path has {len(segments)} segments, at most {max_segments} allowed", field
        )
    return segments


def format_path(path: Path) -> str:
    return ".".join(path)


def resolve(payload: Mapping[str, Any], path: Path) -> Any:
    """The value at ``path``, or ``MISSING`` when some segment is absent or not an object."""
    value: Any = payload
    for segment in path:
        if type(value) is not dict and not isinstance(value, Mapping):  # a dict: no ABC check
            return MISSING
        value = value.get(segment, MISSING)
        if value is MISSING:
            return MISSING
    return value
