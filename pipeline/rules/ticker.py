"""The poll ticker's decision for one watcher: which ticks are due now, and what to remember.

Owns :func:`plan_watcher` (pure over definition, status, activation, memory and ``now``; its
docstring gives the rules, DESIGN.md §3, §5, §8, §10, §11), the :class:`TickerMemory` kept per
watcher in ``ticker-state`` and the :class:`DueTick` it emits; each plan says when the watcher next
needs a look. Cron instants are :mod:`pipeline.rules.cron`'s; calling tools, grants, budgets and
writing ticks are ``producers.ticker.loop``'s."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Final, NamedTuple

from pipeline.rules.cron import (
    MAX_BOUNDED,
    CronSchedule,
    MissedPolicy,
    OneShot,
    one_shot_status,
    plan_due,
)
from pipeline.rules.definition import Mode, WatcherDefinition
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import utc
from pipeline.rules.lifecycle import WatcherStatus, is_closed
from pipeline.rules.sources import PollingSource, ScheduleSource

__all__ = [
    "DEFAULT_GRACE",
    "DueTick",
    "TickKind",
    "TickerMemory",
    "WatcherPlan",
    "plan_watcher",
]

DEFAULT_GRACE: Final = timedelta(seconds=5)
_SKIP: Final = MissedPolicy("skip")
_RECORDED: Final = MissedPolicy("bounded", MAX_BOUNDED)  # a cron schedule's missed, to record


class TickKind(StrEnum):
    """The ``kind`` of a ``tick`` record."""

    POLL = "poll"
    SCHEDULE = "schedule"
    EXPIRY = "expiry"


@dataclass(frozen=True, slots=True)
class TickerMemory:
    """What ``ticker-state`` keeps per watcher: every due instant at or before
    ``enumerated_through`` was ticked or dropped by the missed-run policy."""

    version: int
    status: WatcherStatus
    enumerated_through: datetime
    final_done: bool = False
    expiry_done: bool = False
    one_shot_done: bool = False


@dataclass(frozen=True, slots=True)
class DueTick:
    """One tick to emit. Poll ticks call the watcher's governed tool first."""

    kind: TickKind
    scheduled_at: datetime
    late: bool = False  # past its grace: a one-shot fires late, a cron occurrence was missed
    final: bool = False  # the final evaluation at a once watch's deadline

    @property
    def calls_tool(self) -> bool:
        return self.kind is TickKind.POLL


@dataclass(frozen=True, slots=True)
class WatcherPlan:
    """The decision for one watcher at one ``now``.

    ``persist`` says whether ``memory`` must reach ``ticker-state`` in the transaction of the
    ticks (ticks were emitted, missed instants dropped, or the version or status the ticker acts
    on changed); otherwise
    the memory is only the in-process view and a restart recomputes the same answer.
    ``next_check`` is when something can next fall due (``None``: not before the watcher's
    record changes).
    """

    ticks: tuple[DueTick, ...]
    memory: TickerMemory
    persist: bool
    next_check: datetime | None
    missed: int = 0
    dropped: int = 0
    policy: str | None = None


def _whole_seconds(instant: datetime) -> datetime:
    return instant.replace(microsecond=0)


@dataclass(slots=True)
class _Draft:
    """The memory being decided: mutable while one plan is made (plans are a hot loop; building
    one frozen memory at the end is much cheaper than copying it at every step)."""

    version: int
    status: WatcherStatus
    enumerated_through: datetime
    final_done: bool = False
    expiry_done: bool = False
    one_shot_done: bool = False
    ticks: list[DueTick] = field(default_factory=list)
    checks: list[datetime] = field(default_factory=list)
    missed: int = 0
    dropped: int = 0
    policy: str | None = None

    def memory(self) -> TickerMemory:
        return TickerMemory(
            self.version,
            self.status,
            self.enumerated_through,
            self.final_done,
            self.expiry_done,
            self.one_shot_done,
        )


def _start(
    memory: TickerMemory | None,
    version: int,
    status: WatcherStatus,
    activated_at: datetime | None,
    now: datetime,
) -> _Draft:
    """The memory to plan from: this version's, or a fresh one that backfills nothing twice."""
    if memory is not None and memory.version == version:
        through, one_shot_done = memory.enumerated_through, memory.one_shot_done
        if memory.status is not WatcherStatus.ACTIVE and status is WatcherStatus.ACTIVE:
            # Resumed (or approved): the paused or proposed time was never due. A one-shot
            # still live has not fired (its fire closes it: a pause caught its tick), so it
            # fires now, late; the same instant, the same delivery key, never twice.
            base = now if memory.status is WatcherStatus.PAUSED else (activated_at or now)
            through, one_shot_done = min(utc(base), now), False
        return _Draft(
            version, status, through, memory.final_done, memory.expiry_done, one_shot_done
        )
    if memory is not None:  # a new version continues where the old one's ticks stopped
        base = memory.enumerated_through
    else:
        base = activated_at if activated_at is not None else now
    return _Draft(version, status, min(utc(base), now))


class _Shape(NamedTuple):
    """What a plan needs from a definition: hashable, so equal watchers share one plan."""

    kind: str  # poll | at | cron | other
    sched: CronSchedule | None
    policy: MissedPolicy
    at: datetime | None
    once: bool
    deadline: datetime | None
    retention: timedelta


def _shape(definition: WatcherDefinition) -> _Shape:
    """The deadline-free shape of a definition (the deadline depends on activation)."""
    source = definition.source
    once = definition.mode is Mode.ONCE
    retention = definition.privacy.delivery_retention
    if isinstance(source, PollingSource):
        return _Shape("poll", source.schedule, source.missed_policy, None, once, None, retention)
    if isinstance(source, ScheduleSource) and source.at is not None:
        return _Shape("at", None, _SKIP, source.at, once, None, retention)
    if isinstance(source, ScheduleSource):
        assert source.cron is not None and source.timezone is not None
        sched = _schedule_cron(source.cron, source.timezone)
        return _Shape("cron", sched, _SKIP, None, once, None, retention)
    return _Shape("other", None, _SKIP, None, once, None, retention)


# Shapes by definition instance (a definition is immutable and decoded once per version), and
# interned, so the hot path neither rebuilds nor deep-hashes them. Entries keep their
# definition alive, so an id is never reused while it is cached.
_SHAPES: dict[int, tuple[WatcherDefinition, _Shape]] = {}
_INTERNED: dict[_Shape, _Shape] = {}
_SHAPE_MEMO: Final = 1 << 20


def _shape_of(definition: WatcherDefinition) -> _Shape:
    entry = _SHAPES.get(id(definition))
    if entry is not None and entry[0] is definition:
        return entry[1]
    if len(_SHAPES) >= _SHAPE_MEMO:
        _SHAPES.clear()
        _INTERNED.clear()
    shape = _shape(definition)
    shape = _INTERNED.setdefault(shape, shape)
    _SHAPES[id(definition)] = (definition, shape)
    return shape


def plan_watcher(
    definition: WatcherDefinition,
    status: WatcherStatus,
    activated_at: datetime | None,
    memory: TickerMemory | None,
    now: datetime,
    *,
    grace: timedelta = DEFAULT_GRACE,
) -> WatcherPlan:
    """The ticks due for one watcher version at ``now`` and the memory after them.

    - *polling* watchers tick at their cron's instants (a cadence is ``*/N * * * *`` UTC), with
      the missed-run policy and the backfill horizon ``now - delivery_retention``; a ``once``
      watch gets one final poll *at* its deadline (unless a cron instant already is it);
    - *schedule* watchers: a one-shot ``at`` fires exactly once, flagged late past the grace,
      whatever the horizon; a cron schedule fires none of what it missed and resumes at its
      next instant, but ticks the newest missed ones (up to 100) ``late``, so each is a
      ``missed`` receipt instead of a silent gap (``pipeline.rules.schedules``);
    - every watcher with a deadline gets one *expiry* tick at it, paused ones included;
    - a paused watcher's instants are skipped, not missed: on resume it starts afresh;
    - nothing is enumerated past the deadline.
    """
    version = definition.version
    if version is None:
        raise DefinitionError("a ticked definition has an assigned version", "version")
    if now.tzinfo is not UTC:
        now = utc(now)
    if is_closed(status):
        kept = memory or TickerMemory(version, status, now)
        return WatcherPlan((), kept, persist=False, next_check=None)
    shape = _shape_of(definition)
    deadline = definition.deadline(activated_at)
    active = WatcherStatus.ACTIVE
    if memory is not None and memory.version == version and memory.status is status is active:
        if deadline is None:
            return _steady(shape, memory, now, grace)
        if now >= deadline:
            return _steady(shape._replace(deadline=deadline), memory, now, grace)
        # Before the deadline it only bounds the next check, so watchers that differ only in
        # their deadline share one plan (the common case: a step plans many alike).
        plan = _steady(shape, memory, now, grace)
        if plan.next_check is None or plan.next_check > deadline:
            plan = replace(plan, next_check=deadline)
        return plan
    draft = _start(memory, version, status, activated_at, now)
    changed = memory is None or memory.version != version or memory.status is not status
    return _plan(shape._replace(deadline=deadline), draft, now, grace, changed)


@lru_cache(maxsize=4096)
def _steady(shape: _Shape, memory: TickerMemory, now: datetime, grace: timedelta) -> WatcherPlan:
    """An active watcher planned from its own version's memory. Memoised on the whole
    question: a step plans many watchers with the same shape and memory at the same ``now``."""
    draft = _Draft(
        memory.version,
        memory.status,
        memory.enumerated_through,
        memory.final_done,
        memory.expiry_done,
        memory.one_shot_done,
    )
    return _plan(shape, draft, now, grace, changed=False)


def _plan(
    shape: _Shape, draft: _Draft, now: datetime, grace: timedelta, changed: bool
) -> WatcherPlan:
    if draft.status is WatcherStatus.ACTIVE:
        _active(draft, shape, now, grace)
    else:  # proposed, paused: their instants are never due; a paused one still expires
        _idle(draft, now, shape.deadline if draft.status is WatcherStatus.PAUSED else None)
    ticks = tuple(draft.ticks)
    return WatcherPlan(
        ticks,
        draft.memory(),
        # Dropped instants are persisted too, so a restart does not enumerate them again.
        persist=bool(ticks) or changed or draft.dropped > 0,
        next_check=min(draft.checks) if draft.checks else None,
        missed=draft.missed,
        dropped=draft.dropped,
        policy=draft.policy,
    )


def _idle(draft: _Draft, now: datetime, deadline: datetime | None) -> None:
    draft.enumerated_through = max(draft.enumerated_through, _whole_seconds(now))
    if deadline is not None and not draft.expiry_done:
        if now >= deadline:
            draft.ticks.append(DueTick(TickKind.EXPIRY, deadline))
            draft.expiry_done = True
        else:
            draft.checks.append(deadline)


def _active(draft: _Draft, shape: _Shape, now: datetime, grace: timedelta) -> None:
    deadline = shape.deadline
    until = now if deadline is None or now <= deadline else deadline
    ticks, checks = draft.ticks, draft.checks
    if shape.kind == "poll":
        assert shape.sched is not None
        horizon = now - shape.retention
        next_fire = _cron(draft, shape.sched, shape.policy, until, now, grace, horizon)
        if deadline is not None and any(t.scheduled_at == deadline for t in ticks):
            draft.final_done = True
        if shape.once and deadline is not None and not draft.final_done:
            if now >= deadline:
                ticks.append(DueTick(TickKind.POLL, deadline, final=True))
                draft.final_done = True
            else:
                checks.append(deadline)
        checks.append(next_fire)
    elif shape.kind == "at":
        at = shape.at
        assert at is not None
        if not draft.one_shot_done:
            if at <= until:
                late = one_shot_status(at, now, grace=grace) is OneShot.LATE
                ticks.append(DueTick(TickKind.SCHEDULE, at, late=late))
                draft.one_shot_done = True
            elif deadline is None or at <= deadline:
                checks.append(at)
    elif shape.kind == "cron":
        assert shape.sched is not None
        kind = TickKind.SCHEDULE
        checks.append(_cron(draft, shape.sched, _RECORDED, until, now, grace, None, kind))

    through = _whole_seconds(until)
    if through > draft.enumerated_through:
        draft.enumerated_through = through
    if deadline is not None:
        if not draft.expiry_done:
            if now >= deadline:
                ticks.append(DueTick(TickKind.EXPIRY, deadline))
                draft.expiry_done = True
            else:
                checks.append(deadline)
        draft.checks = [c for c in checks if c <= deadline]


def _cron(
    draft: _Draft,
    sched: CronSchedule,
    policy: MissedPolicy,
    until: datetime,
    now: datetime,
    grace: timedelta,
    horizon: datetime | None,
    kind: TickKind = TickKind.POLL,
) -> datetime:
    """Add the fires in ``(enumerated_through, until]`` to ``draft``: on time relative to
    ``now``, missed ones filtered by ``policy``. Returns the next instant after ``until``."""
    last = draft.enumerated_through
    if until <= last:
        return plan_due(sched, until, until, policy, grace=grace).next_fire
    if until < now:
        # Past the deadline: an instant is on time only if the ticker saw it within the grace.
        grace = grace - (now - until)
    plan = plan_due(sched, last, until, policy, grace=grace, horizon=horizon)
    if kind is TickKind.SCHEDULE:
        # A cron schedule skips every missed instant: the ones ``policy`` keeps are ticked
        # ``late`` (recorded as missed, never fired), the rest only counted.
        kept = plan.missed - plan.dropped
        draft.ticks.extend(DueTick(kind, at, late=n < kept) for n, at in enumerate(plan.fire))
        draft.missed, draft.dropped, draft.policy = plan.missed, plan.missed, _SKIP.kind
        return plan.next_fire
    draft.ticks.extend(DueTick(kind, at) for at in plan.fire)
    draft.missed, draft.dropped, draft.policy = plan.missed, plan.dropped, policy.kind
    return plan.next_fire


@lru_cache(maxsize=1024)
def _schedule_cron(expr: str, timezone: str) -> CronSchedule:
    return CronSchedule.parse(expr, timezone, "source.cron")
