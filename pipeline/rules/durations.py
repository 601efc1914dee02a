"""Durations as users write them: ``45s``, ``90m``, ``1h30m``, ``2d``, ``7d``.

Hand-written because the grammar is tiny and strict (no ISO 8601, no fractions, no signs) and
every error should name the field. Units: d, h, m, s, each at most once, in that order.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

from pipeline.rules.errors import DefinitionError

__all__ = ["Duration", "format_duration", "parse_duration"]

_GRAMMAR = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str, field: str = "duration") -> timedelta:
    """A positive duration; anything else raises :class:`DefinitionError` naming ``field``."""
    match = _GRAMMAR.match(text.strip()) if isinstance(text, str) else None
    if not match or not any(match.groups()):
        raise DefinitionError(f"not a duration: {text!r} (use e.g. 45s, 90m, 1h30m, 2d)", field)
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    value = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    if value <= timedelta(0):
        raise DefinitionError(f"duration must be positive: {text!r}", field)
    return value


def format_duration(value: timedelta) -> str:
    """The shortest text that :func:`parse_duration` reads back to ``value`` (whole seconds)."""
    total = int(value.total_seconds())
    if total <= 0:
        raise ValueError("only positive durations have a text form")
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        amount, total = divmod(total, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)


def _duration(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except DefinitionError as exc:
            raise ValueError(exc.message) from None
    return value


Duration = Annotated[
    timedelta, BeforeValidator(_duration), PlainSerializer(format_duration, when_used="json")
]
"""A duration field of a pydantic model: text (``90m``) or a ``timedelta`` in, text out in JSON."""
