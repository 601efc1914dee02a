"""Durations as users write them: ``45s``, ``90m``, ``1h30m``, ``2d``, ``7d``.

Hand-written because the grammar is tiny and strict (no ISO 8601, no fractions, no signs) and
every error should name the field. Units: d, h, m, s, each at most once, in that order. Total and
bounded (DESIGN.md §10): the text is length-checked before the grammar sees it and a duration
is at most :data:`~pipeline.rules.bounds.MAX_DURATION` (ten years), so no input can overflow a
``timedelta`` or an instant computed from one.
"""

from __future__ import annotations

import re
from datetime import timedelta
from functools import lru_cache
from typing import Annotated, Any, Final

from pydantic import BeforeValidator, PlainSerializer

from pipeline.rules.bounds import MAX_DURATION
from pipeline.rules.errors import DefinitionError

__all__ = [
    "MAX_TEXT",
    "Duration",
    "check_duration",
    "format_duration",
    "from_micros",
    "parse_duration",
    "to_micros",
]

MAX_TEXT = 32
"""The longest duration text read (``3653d23h59m59s`` is 14 characters)."""
_MEMO: Final = 1024  # distinct duration texts remembered for model fields
# Each amount is at most 9 digits: every unit of ten years fits, and int() stays cheap.
_GRAMMAR = re.compile(r"(?:(\d{1,9})d)?(?:(\d{1,9})h)?(?:(\d{1,9})m)?(?:(\d{1,9})s)?")


def parse_duration(text: str, field: str = "duration") -> timedelta:
    """A positive duration of at most ten years; anything else raises
    :class:`DefinitionError` naming ``field``."""
    match = None
    if isinstance(text, str) and len(text) <= MAX_TEXT:
        match = _GRAMMAR.fullmatch(text.strip())
    if not match or not any(match.groups()):
        shown = text[:MAX_TEXT] if isinstance(text, str) else text
        raise DefinitionError(f"not a duration: {shown!r} (use e.g. 45s, 90m, 1h30m, 2d)", field)
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    value = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    if value <= timedelta(0):
        raise DefinitionError(f"duration must be positive: {text!r}", field)
    return check_duration(value, field)


def to_micros(value: timedelta) -> int:
    """A duration as whole microseconds (how records carry durations and instants, and what
    backoff and budget windows compute in): exact integer arithmetic, no float."""
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds


def from_micros(micros: int) -> timedelta:
    """Whole microseconds as a duration (:func:`to_micros` back)."""
    return timedelta(microseconds=micros)


def check_duration(value: timedelta, field: str = "duration") -> timedelta:
    """``value`` if it is at most ten years (:data:`MAX_DURATION`), else a refusal."""
    if value > MAX_DURATION:
        raise DefinitionError(
            f"a duration is at most {MAX_DURATION.days}d (ten years), got {value.days}d", field
        )
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


@lru_cache(maxsize=_MEMO)
def _parsed(text: str) -> timedelta:
    """:func:`parse_duration` of a model field's text, remembered: definitions repeat a few
    durations (``1h``, ``7d``, ``30d``) thousands of times, and an evaluator parses every
    definition it opens. Refusals are not remembered (they raise)."""
    return parse_duration(text)


def _duration(value: Any) -> Any:
    try:
        if type(value) is str:
            return _parsed(value)
        if isinstance(value, str):
            return parse_duration(value)
        if isinstance(value, timedelta):
            return check_duration(value)
    except DefinitionError as exc:
        raise ValueError(exc.message) from None
    raise ValueError("expected a duration such as 45s, 90m, 1h30m or 2d")


Duration = Annotated[
    timedelta, BeforeValidator(_duration), PlainSerializer(format_duration, when_used="json")
]
"""A duration field of a pydantic model: text (``90m``) or a ``timedelta`` in, text out in JSON."""
