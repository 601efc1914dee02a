"""Quiet hours: a daily window of local minutes in which deliveries wait.

Owns the window (``[start, end)`` of local wall time, wrapping midnight when start > end), the
"is this instant quiet" test and the next allowed instant. The next allowed instant is found the
way DESIGN §8 fixes it: step whole UTC minutes and convert each to local wall time, so spring-
forward gaps and both fall-back occurrences come out right with no special cases. Deciding to
defer a delivery, and recording why, is the dispatch state machine's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import utc
from pipeline.rules.zones import load_zone, parse_clock

__all__ = ["QuietHours", "is_quiet", "next_allowed"]

_MINUTES_PER_DAY = 1440
_MINUTE = timedelta(minutes=1)
# A window is at most 1439 minutes of one local day; a fall-back can repeat up to a few hours
# of it. Three days of minutes is far past any real exit, so hitting it means a broken zone.
_MAX_STEPS = 3 * _MINUTES_PER_DAY


@dataclass(frozen=True, slots=True)
class QuietHours:
    """``[start_minute, end_minute)`` of local time in ``zone``."""

    start_minute: int
    end_minute: int
    zone: ZoneInfo

    def __post_init__(self) -> None:
        for name, value in (("start", self.start_minute), ("end", self.end_minute)):
            if isinstance(value, bool) or not 0 <= value < _MINUTES_PER_DAY:
                raise DefinitionError(f"minute of day must be 0..1439, got {value!r}", name)
        if self.start_minute == self.end_minute:
            raise DefinitionError(
                "quiet hours start and end are equal: that window is either empty or the whole "
                "day, so it is refused (omit quiet hours, or give two different times)",
                "end",
            )

    @classmethod
    def parse(
        cls, start: str, end: str, timezone: str, *, field: str = "quiet_hours"
    ) -> QuietHours:
        """From ``HH:MM`` texts and an IANA zone; errors name ``<field>.start|end|timezone``."""
        start_minute = parse_clock(start, f"{field}.start")
        end_minute = parse_clock(end, f"{field}.end")
        zone = load_zone(timezone, f"{field}.timezone")
        if start_minute == end_minute:
            raise DefinitionError(
                f"start and end are both {start!r}: the window would be empty or the whole day; "
                "give two different times",
                f"{field}.end",
            )
        return cls(start_minute, end_minute, zone)


def _local_minute(qh: QuietHours, instant: datetime) -> int:
    local = instant.astimezone(qh.zone)
    return local.hour * 60 + local.minute


def _in_window(qh: QuietHours, minute: int) -> bool:
    if qh.start_minute < qh.end_minute:
        return qh.start_minute <= minute < qh.end_minute
    return minute >= qh.start_minute or minute < qh.end_minute


def is_quiet(qh: QuietHours, instant: datetime) -> bool:
    """Whether ``instant``'s local wall minute lies inside the window."""
    return _in_window(qh, _local_minute(qh, utc(instant)))


def next_allowed(qh: QuietHours, due: datetime) -> datetime:
    """``due`` itself when it is not quiet; otherwise the first whole UTC minute after it whose
    local wall time is outside the window (seconds zeroed, each minute converted afresh).
    """
    due = utc(due)
    if not _in_window(qh, _local_minute(qh, due)):
        return due
    candidate = due.replace(second=0, microsecond=0)
    for _ in range(_MAX_STEPS):
        candidate += _MINUTE
        if not _in_window(qh, _local_minute(qh, candidate)):
            return candidate
    raise DefinitionError(f"no allowed minute within three days in {qh.zone.key}", "quiet_hours")
