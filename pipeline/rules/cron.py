"""Cron schedules and due instants: parsing, fires between two instants, missed-run policies,
one-shot lateness and agent-watch cadences.

Owns the ticker's decision of *which scheduled instants fire now* (:func:`plan_due`), as pure
functions over an injected ``now``. The DST slot rules live in :mod:`pipeline.rules.cron_slots`;
calling tools, emitting ticks and remembering ``last_enumerated`` are the ticker's job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo

from croniter import croniter

from pipeline.rules.cron_slots import (
    MAX_YEARS_BETWEEN_DAYS,
    cron_fields,
    fires_in,
    first_fire_after,
    newest_fires,
)
from pipeline.rules.durations import to_micros
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import to_epoch_micros, utc
from pipeline.rules.zones import load_zone

__all__ = [
    "CADENCE_MINUTES",
    "MAX_CRON_CHARS",
    "CronSchedule",
    "DuePlan",
    "MissedPolicy",
    "OneShot",
    "cadence_cron",
    "fires_between",
    "next_fire",
    "one_shot_status",
    "plan_due",
]

CADENCE_MINUTES = frozenset({1, 5, 15, 60})
MAX_CRON_CHARS = 256
"""The longest cron text read: checked before any split, pattern or croniter sees it (a list of
every minute, ``0,1,…,59``, is 170 characters)."""
MAX_BOUNDED = 100
MAX_MISSED_SCAN = 1_440
"""Missed instants looked at per plan, newest first: a policy fires at most 100 of them, and
older ones are dropped uncounted (so ``missed`` counts at most this many), which keeps a plan
after a long outage as cheap as one after a short one."""
_DEFAULT_GRACE = timedelta(seconds=5)

# Per field: what Debian cron and croniter both read the same way. No "?", "W", "H" (hashing),
# "@" macros or seconds; "L" only as a day of month, "#" only in day of week.
_FIELD_SHAPES = (
    ("minute", re.compile(r"^[\d*/,\-]+$")),
    ("hour", re.compile(r"^[\d*/,\-]+$")),
    ("day of month", re.compile(r"^(?:L|[\d*/,\-]+)$")),
    (
        "month",
        re.compile(r"^(?:[\d*/,\-]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)+$", re.I),
    ),
    ("day of week", re.compile(r"^(?:[\d*/,\-#]|sun|mon|tue|wed|thu|fri|sat)+$", re.I)),
)


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A five-field cron read on the local wall clock of ``zone``."""

    expr: str
    zone: ZoneInfo

    @classmethod
    def parse(cls, expr: str, timezone: str, field: str = "cron") -> CronSchedule:
        """Validate exactly five fields (errors name ``field``) and the zone (``timezone``)."""
        zone = load_zone(timezone, "timezone" if field == "cron" else f"{field}.timezone")
        return cls(_validated(expr, field), zone)


def _validated(expr: str, field: str) -> str:
    if not isinstance(expr, str):
        raise DefinitionError(f"cron must be text, got {type(expr).__name__}", field)
    if len(expr) > MAX_CRON_CHARS:
        raise DefinitionError(f"cron is longer than {MAX_CRON_CHARS} characters", field)
    parts = expr.split()
    if len(parts) != 5:
        raise DefinitionError(
            f"cron needs exactly five fields (minute hour day month weekday), got {len(parts)}: "
            f"{expr!r}",
            field,
        )
    for (name, shape), part in zip(_FIELD_SHAPES, parts, strict=True):
        if not shape.match(part):
            raise DefinitionError(f"unsupported {name} field {part!r} in {expr!r}", field)
    normal = " ".join(parts)
    if not croniter.is_valid(normal):
        raise DefinitionError(f"not a valid cron expression: {expr!r}", field)
    try:
        cron_fields(normal)
        first_fire_after(normal, ZoneInfo("UTC"), 946_684_800)  # 2000-01-01: does it ever fire?
    except Exception as exc:  # croniter's errors share no useful base class
        raise DefinitionError(
            f"cron {expr!r} never fires (no matching day within {MAX_YEARS_BETWEEN_DAYS} years)",
            field,
        ) from exc
    return normal


def _seconds(instant: datetime) -> int:
    return to_epoch_micros(instant) // 1_000_000


def _instant(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def fires_between(sched: CronSchedule, after: datetime, until: datetime) -> list[datetime]:
    """UTC fires in ``(after, until]``, ascending, by Debian cron's DST rules."""
    return [_instant(s) for s in fires_in(sched.expr, sched.zone, _seconds(after), _seconds(until))]


def next_fire(sched: CronSchedule, after: datetime) -> datetime:
    """The first fire strictly after ``after``."""
    return _instant(first_fire_after(sched.expr, sched.zone, _seconds(after)))


@dataclass(frozen=True, slots=True)
class MissedPolicy:
    """What to do with instants that fell due while nothing ran (DESIGN §8)."""

    kind: Literal["skip", "latest", "bounded"]
    n: int = 1

    def __post_init__(self) -> None:
        if self.kind not in ("skip", "latest", "bounded"):
            raise DefinitionError(f"unknown missed-run policy {self.kind!r}", "missed_runs")
        if (
            isinstance(self.n, bool)
            or not isinstance(self.n, int)
            or not 1 <= self.n <= MAX_BOUNDED
        ):
            raise DefinitionError(
                f"bounded(n) needs 1 <= n <= {MAX_BOUNDED}, got {self.n!r}", "missed_runs.bounded"
            )

    @classmethod
    def parse(cls, raw: str | Mapping[str, object], field: str = "missed_runs") -> MissedPolicy:
        """``"skip"``, ``"latest"`` or ``{"bounded": n}``; anything else names ``field``."""
        if raw in ("skip", "latest"):
            return cls(raw)  # type: ignore[arg-type]
        if isinstance(raw, Mapping) and list(raw) == ["bounded"]:
            n = raw["bounded"]
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BOUNDED:
                raise DefinitionError(
                    f"bounded needs an integer 1..{MAX_BOUNDED}, got {n!r}", f"{field}.bounded"
                )
            return cls("bounded", n)
        raise DefinitionError(
            f'missed-run policy must be "skip", "latest" or {{"bounded": n}}, got {raw!r}', field
        )

    def keep(self, missed: list[int]) -> list[int]:
        """The missed instants (ascending) this policy still fires, oldest first."""
        if self.kind == "skip" or not missed:
            return []
        return missed[-1:] if self.kind == "latest" else missed[-self.n :]


@dataclass(frozen=True, slots=True)
class DuePlan:
    """The ticker's decision for one step: what fires now and where enumeration resumes."""

    fire: tuple[datetime, ...]
    missed: int
    dropped: int
    enumerated_through: datetime
    next_fire: datetime


def plan_due(
    sched: CronSchedule,
    last_enumerated: datetime,
    now: datetime,
    policy: MissedPolicy,
    *,
    grace: timedelta = _DEFAULT_GRACE,
    horizon: datetime | None = None,
) -> DuePlan:
    """Instants in ``(last_enumerated, now]``: those within ``grace`` of ``now`` fire; older
    ones are missed and filtered by ``policy``. Nothing earlier than ``horizon`` (the backfill
    bound ``now - delivery_retention``) is enumerated, so a re-emitted instant still meets its
    dedupe key.
    """
    return _plan(sched, last_enumerated, now, policy, grace, horizon)


# Memoised on the whole question: a ticker steps many watchers that share (cron, zone) with the
# same (last_enumerated, now), and they all get one computation. Plans are immutable.
@lru_cache(maxsize=4096)
def _plan(
    sched: CronSchedule,
    last_enumerated: datetime,
    now: datetime,
    policy: MissedPolicy,
    grace: timedelta,
    horizon: datetime | None,
) -> DuePlan:
    floor = _seconds(last_enumerated)
    if horizon is not None:
        floor = max(floor, -(-to_epoch_micros(horizon) // 1_000_000) - 1)
    now_s = _seconds(now)
    on_time_from_micros = to_epoch_micros(now) - to_micros(grace)
    # A fire at second s is on time iff s · 10^6 >= on_time_from: the missed ones end at cut.
    cut = min(-(-on_time_from_micros // 1_000_000) - 1, now_s)
    missed = newest_fires(sched.expr, sched.zone, floor, cut, MAX_MISSED_SCAN)
    on_time = fires_in(sched.expr, sched.zone, max(floor, cut), now_s)
    kept = policy.keep(missed)
    last = on_time[-1] if on_time else missed[-1] if missed else None
    return DuePlan(
        fire=tuple(_instant(s) for s in (*kept, *on_time)),
        missed=len(missed),
        dropped=len(missed) - len(kept),
        enumerated_through=utc(last_enumerated) if last is None else _instant(last),
        next_fire=_instant(first_fire_after(sched.expr, sched.zone, now_s)),
    )


class OneShot(Enum):
    """Where a one-shot ``at`` stands at ``now``. It fires exactly once, late if it must."""

    NOT_DUE = "not_due"
    DUE = "due"
    LATE = "late"


def one_shot_status(at: datetime, now: datetime, *, grace: timedelta = _DEFAULT_GRACE) -> OneShot:
    """``late`` past ``grace``: it still fires (flagged late, with ``at`` as its due instant),
    whatever the backfill bound, because a one-shot cannot pile up.
    """
    at, now = utc(at), utc(now)
    if at > now:
        return OneShot.NOT_DUE
    return OneShot.DUE if now - at <= grace else OneShot.LATE


def cadence_cron(minutes: int) -> str:
    """An agent watch's cadence as cron (DESIGN §10): ``*/N * * * *``, 60 → ``0 * * * *``."""
    if isinstance(minutes, bool) or minutes not in CADENCE_MINUTES:
        raise DefinitionError(
            f"cadence must be one of {sorted(CADENCE_MINUTES)} minutes, got {minutes!r}", "cadence"
        )
    return "0 * * * *" if minutes == 60 else f"*/{minutes} * * * *"
