"""Local time at the edges: IANA zones, local wall times, ``--at`` and ``HH:MM`` clock text.

Owns validating zone names (tzdata via :mod:`zoneinfo`), turning a local wall time into an
aware UTC instant (ambiguous → first occurrence, nonexistent → a clear error), and parsing the
two user-facing local-time texts. Quiet hours and cron live in their own modules; instants
with an explicit offset are parsed by :mod:`pipeline.rules.instants`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, available_timezones

from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import parse_instant

__all__ = [
    "is_nonexistent",
    "load_zone",
    "parse_at",
    "parse_clock",
    "resolve_local",
]

# Names that zoneinfo may find on a host but that are not a place: the host's own setting,
# tzdata's "no zone configured" placeholder and compatibility links to them.
_NOT_A_PLACE = frozenset({"local", "localtime", "Factory", "posixrules", "posixrules.dat"})
_ZONE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*$")
_LOCAL_AT = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2}))?$")
_OFFSET_AT = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:[Zz]|[+-]\d{2}:\d{2})$"
)
_CLOCK = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


@lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones()) - _NOT_A_PLACE


@lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def load_zone(name: str, field: str = "timezone") -> ZoneInfo:
    """A validated IANA zone. Host-local names, paths and unknown keys are refused, not guessed."""
    if not isinstance(name, str) or not _ZONE_NAME.match(name) or name not in _known_zones():
        raise DefinitionError(f"not an IANA time zone name: {name!r} (e.g. Europe/Berlin)", field)
    return _zone(name)


def is_nonexistent(naive: datetime, zone: ZoneInfo) -> bool:
    """True when clocks jump over ``naive`` (a spring-forward gap)."""
    local = naive.replace(tzinfo=zone)
    return local.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != naive


def resolve_local(naive: datetime, zone: ZoneInfo, field: str = "at") -> datetime:
    """A local wall time as aware UTC: a repeated time means its first occurrence; a skipped one
    is an error, because silently moving a user's instant would fire at a time they never wrote.
    """
    if naive.tzinfo is not None:
        raise ValueError(f"resolve_local takes a naive wall time, got {naive!r}")
    if is_nonexistent(naive, zone):
        raise DefinitionError(
            f"{naive.isoformat(timespec='minutes')} does not exist in {zone.key} "
            "(clocks jump forward over it); pick a time outside the gap",
            field,
        )
    return naive.replace(tzinfo=zone, fold=0).astimezone(UTC)


def parse_at(text: str, zone: ZoneInfo, field: str = "at") -> datetime:
    """``--at``: RFC 3339 with an offset, or a local date-time (``2026-12-01T08:00``,
    ``2026-12-01 08:00:30``) read in ``zone``. Returns aware UTC.
    """
    stripped = text.strip() if isinstance(text, str) else ""
    if _OFFSET_AT.match(stripped):
        return parse_instant(stripped, field)
    match = _LOCAL_AT.match(stripped)
    if not match:
        raise DefinitionError(
            f"not a date-time: {text!r} (use 2026-12-01T08:00, or RFC 3339 with an offset)", field
        )
    year, month, day, hour, minute = (int(g) for g in match.groups()[:5])
    second = int(match.group(6) or 0)
    try:
        naive = datetime(year, month, day, hour, minute, second)
    except ValueError as exc:
        raise DefinitionError(f"not a date-time: {text!r} ({exc})", field) from exc
    return resolve_local(naive, zone, field)


def parse_clock(text: str, field: str) -> int:
    """``HH:MM`` (24-hour, two digits each) as the minute of the day, 0..1439."""
    match = _CLOCK.match(text) if isinstance(text, str) else None
    if not match:
        raise DefinitionError(f"not a clock time: {text!r} (use HH:MM, 00:00 to 23:59)", field)
    return int(match.group(1)) * 60 + int(match.group(2))
