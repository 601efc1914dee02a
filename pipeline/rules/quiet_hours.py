"""Quiet hours: a daily window of local minutes in which deliveries wait.

Owns :class:`QuietHours` (``HH:MM`` start and end in an IANA zone, ``[start, end)`` of local wall
time, wrapping midnight when start > end), the "is this instant quiet" test and the next allowed
instant, found by stepping whole UTC minutes (DESIGN §8), so DST gaps and overlaps need no special
case. Deciding to defer, and recording why, is the dispatch state machine's."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import cached_property
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, model_validator

from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import utc
from pipeline.rules.zones import load_zone, parse_clock

__all__ = ["QuietHours", "is_quiet", "next_allowed"]

_MINUTES_PER_DAY = 1440
_MINUTE = timedelta(minutes=1)
# A window is at most 1439 minutes of one local day; a fall-back can repeat up to a few hours
# of it. Three days of minutes is far past any real exit, so hitting it means a broken zone.
_MAX_STEPS = 3 * _MINUTES_PER_DAY


class QuietHours(BaseModel):
    """``[start, end)`` of local wall time in ``timezone``; errors name ``quiet_hours.*``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    start: str
    end: str
    timezone: str

    @model_validator(mode="after")
    def _valid(self) -> QuietHours:
        start, end, _ = self.start_minute, self.end_minute, self.zone
        if start == end:
            raise DefinitionError(
                f"start and end are both {self.start!r}: the window would be empty or the "
                "whole day; give two different times",
                "quiet_hours.end",
            )
        return self

    @classmethod
    def parse(cls, start: str, end: str, timezone: str) -> QuietHours:
        return cls(start=start, end=end, timezone=timezone)

    @classmethod
    def from_minutes(cls, start_minute: int, end_minute: int, timezone: str) -> QuietHours:
        """From minutes of the local day (``0..1439``)."""
        return cls.parse(_clock(start_minute), _clock(end_minute), timezone)

    @cached_property
    def start_minute(self) -> int:
        return parse_clock(self.start, "quiet_hours.start")

    @cached_property
    def end_minute(self) -> int:
        return parse_clock(self.end, "quiet_hours.end")

    @cached_property
    def zone(self) -> ZoneInfo:
        return load_zone(self.timezone, "quiet_hours.timezone")


def _clock(minute: int) -> str:
    if isinstance(minute, bool) or not 0 <= minute < _MINUTES_PER_DAY:
        raise DefinitionError(f"minute of day must be 0..1439, got {minute!r}", "quiet_hours")
    return f"{minute // 60:02d}:{minute % 60:02d}"


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
