"""Cron slots: which UTC instants a five-field cron fires at in a zone (Debian cron DST rules).

Owns the slot engine behind :mod:`pipeline.rules.cron`: croniter expands fields and finds days; a
*fixed* job fires once per wall time (an ambiguous one at its first occurrence, one in a gap at the
first minute after it), any other job at every real instant whose local time matches. Fires are
epoch seconds, memoised per local day. Policies (missed runs, one-shots) are
:mod:`pipeline.rules.cron`'s."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from itertools import product
from zoneinfo import ZoneInfo

from croniter import croniter

__all__ = [
    "CronFields",
    "cron_fields",
    "day_fires",
    "fires_in",
    "first_fire_after",
    "local_day",
    "newest_fires",
]

_EPOCH = datetime(1970, 1, 1)
_ONE_SECOND = timedelta(seconds=1)
_MINUTE = timedelta(minutes=1)
# Real offset changes never move the wall clock by a day or more within one step, so fires of
# local day D all lie between local days D-1 and D+1 of any window touching them.
_DAY_MARGIN = 1
# croniter gives up when no day matches for this long (29 February needs 8 years around 2100).
MAX_YEARS_BETWEEN_DAYS = 9
_SEARCH_DAYS = MAX_YEARS_BETWEEN_DAYS * 366


@dataclass(frozen=True, slots=True)
class CronFields:
    """A parsed expression: minutes and hours to fire at on each matching day."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    day_expr: str
    day_or: bool
    fixed: bool


@lru_cache(maxsize=1024)
def cron_fields(expr: str) -> CronFields:
    """Expand a validated five-field expression (raises croniter's errors on a bad one)."""
    minute, hour, dom, month, dow = expr.split()
    expanded, _ = croniter.expand(expr)
    minutes = tuple(range(60)) if expanded[0] == ["*"] else tuple(sorted(map(int, expanded[0])))
    hours = tuple(range(24)) if expanded[1] == ["*"] else tuple(sorted(map(int, expanded[1])))
    return CronFields(
        minutes=minutes,
        hours=hours,
        day_expr=f"0 0 {dom} {month} {dow}",
        # Vixie/Debian cron: a day-of-month or day-of-week field starting with "*" makes the
        # two an AND; two restricted fields are an OR.
        day_or=not (dom.startswith("*") or dow.startswith("*")),
        fixed=not (minute.startswith("*") or hour.startswith("*")),
    )


@lru_cache(maxsize=16384)
def _matching_day_from(day_expr: str, day_or: bool, ordinal: int) -> int:
    """The first day (proleptic ordinal) on or after ``ordinal`` whose calendar fields match."""
    start = datetime.combine(date.fromordinal(ordinal), time()) - _ONE_SECOND
    found = croniter(
        day_expr,
        start,
        day_or=day_or,
        max_years_between_matches=MAX_YEARS_BETWEEN_DAYS,
    ).get_next(datetime)
    return int(found.toordinal())


_EVERY_DAY = "0 0 * * *"


@lru_cache(maxsize=16384)
def _matching_day_before(day_expr: str, day_or: bool, ordinal: int) -> int | None:
    """The last day (proleptic ordinal) on or before ``ordinal`` whose calendar fields match,
    or None when none does within :data:`MAX_YEARS_BETWEEN_DAYS` years."""
    if day_expr == _EVERY_DAY:
        return ordinal
    start = datetime.combine(date.fromordinal(ordinal), time()) + timedelta(days=1)
    try:
        found = croniter(
            day_expr, start, day_or=day_or, max_years_between_matches=MAX_YEARS_BETWEEN_DAYS
        ).get_prev(datetime)
    except Exception:  # croniter gives up (no match for years) with errors of no common base
        return None
    return int(found.toordinal())


def _epoch_seconds(naive_utc: datetime) -> int:
    return (naive_utc - _EPOCH) // _ONE_SECOND


def _wall_instants(naive: datetime, zone: ZoneInfo, fixed: bool) -> tuple[int, ...]:
    """The real instants (epoch seconds) at which wall time ``naive`` fires in ``zone``."""
    first = naive.replace(tzinfo=zone, fold=0).utcoffset()
    second = naive.replace(tzinfo=zone, fold=1).utcoffset()
    assert first is not None and second is not None
    if first == second:
        return (_epoch_seconds(naive - first),)
    if first > second:  # fall-back overlap: the wall time happens twice
        if fixed:
            return (_epoch_seconds(naive - first),)
        return (_epoch_seconds(naive - first), _epoch_seconds(naive - second))
    if not fixed:  # spring-forward gap: the wall time never happens
        return ()
    later = naive
    while later.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(tzinfo=None) != later:
        later += _MINUTE  # cronsim's rule: the first whole minute after the gap
    offset = later.replace(tzinfo=zone).utcoffset()
    assert offset is not None
    return (_epoch_seconds(later - offset),)


@lru_cache(maxsize=4096)
def day_fires(expr: str, zone: ZoneInfo, ordinal: int) -> tuple[int, ...]:
    """Fires (epoch seconds, ascending, unique) of local calendar day ``ordinal``."""
    fields = cron_fields(expr)
    if _matching_day_from(fields.day_expr, fields.day_or, ordinal) != ordinal:
        return ()
    midnight = datetime.combine(date.fromordinal(ordinal), time())
    fires: set[int] = set()
    for hour, minute in product(fields.hours, fields.minutes):
        wall = midnight.replace(hour=hour, minute=minute)
        fires.update(_wall_instants(wall, zone, fields.fixed))
    return tuple(sorted(fires))


def local_day(epoch_seconds: int, zone: ZoneInfo) -> int:
    """The local calendar day (ordinal) of an instant."""
    return datetime.fromtimestamp(epoch_seconds, zone).toordinal()


def fires_in(expr: str, zone: ZoneInfo, after: int, until: int) -> list[int]:
    """Fires in ``(after, until]`` (epoch seconds), ascending and unique."""
    if until <= after:
        return []
    fields = cron_fields(expr)
    lo_day, hi_day = local_day(after, zone), local_day(until, zone)
    day = min(lo_day, hi_day) - _DAY_MARGIN
    last_day = max(lo_day, hi_day) + _DAY_MARGIN
    found: list[int] = []
    chunks = 0
    while True:
        day = _matching_day_from(fields.day_expr, fields.day_or, day)
        if day > last_day:
            break
        fires = day_fires(expr, zone, day)
        if fires and fires[-1] > after and fires[0] <= until:
            found.extend(fires[bisect_right(fires, after) : bisect_right(fires, until)])
            chunks += 1
        day += 1
    return sorted(set(found)) if chunks > 1 else found


def newest_fires(expr: str, zone: ZoneInfo, after: int, until: int, limit: int) -> list[int]:
    """The newest ``limit`` fires in ``(after, until]`` (epoch seconds), ascending and unique.

    Walks matching local days backwards from ``until``, so its cost is bounded by ``limit``
    (and the days it must skip), not by the length of the range: a ticker back after ten
    years of a per-minute cron looks at a day, not at five million instants.
    """
    if until <= after or limit <= 0:
        return []
    fields = cron_fields(expr)
    lo_day = min(local_day(after, zone), local_day(until, zone)) - _DAY_MARGIN
    day: int | None = max(local_day(after, zone), local_day(until, zone)) + _DAY_MARGIN
    found: set[int] = set()
    stop_day: int | None = None
    while day is not None and day >= lo_day:
        day = _matching_day_before(fields.day_expr, fields.day_or, day)
        if day is None or day < lo_day or (stop_day is not None and day < stop_day):
            break
        fires = day_fires(expr, zone, day)
        found.update(fires[bisect_right(fires, after) : bisect_right(fires, until)])
        if stop_day is None and len(found) >= limit:
            # A neighbouring day can only interleave through a transition at midnight.
            stop_day = day - _DAY_MARGIN
        day -= 1
    return sorted(found)[-limit:]


def first_fire_after(expr: str, zone: ZoneInfo, after: int) -> int:
    """The first fire strictly after ``after`` (epoch seconds)."""
    fields = cron_fields(expr)
    day = local_day(after, zone) - _DAY_MARGIN
    best: int | None = None
    stop_day: int | None = None
    for _ in range(_SEARCH_DAYS):
        day = _matching_day_from(fields.day_expr, fields.day_or, day)
        if stop_day is not None and day > stop_day:
            break
        fires = day_fires(expr, zone, day)
        index = bisect_right(fires, after)
        if index < len(fires):
            best = fires[index] if best is None else min(best, fires[index])
            # A neighbouring day can only interleave through a transition at midnight.
            stop_day = stop_day or day + _DAY_MARGIN
        day += 1
    if best is None:
        raise ValueError(f"cron {expr!r} has no fire within {MAX_YEARS_BETWEEN_DAYS} years")
    return best
