"""Limits on what commands create (DESIGN.md §10 "Limits"): counted per subject and per session.

Owns :class:`Limits` (the configurable caps and their documented defaults), :class:`Room` (what a
subject holds now, counted over its registry view) and :func:`stale_proposals` (proposals past their
approval time); all pure counts. Refusing (``cap_reached``) and forgetting expired proposals are
``context``'s and ``apply``'s; seed 003's three agent watches per session is ``context.AGENT_CAP``,
not a setting."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from pipeline.rules.commands.model import RegistryEntry
from pipeline.rules.lifecycle import WatcherStatus, is_live

__all__ = [
    "DEFAULT_LIMITS",
    "SCHEDULE_PREFIX",
    "Limits",
    "Room",
    "is_schedule",
    "stale_proposals",
]

SCHEDULE_PREFIX: Final = "schedule:"
"""Watcher ids of the control plane's schedules: ``schedule:<chat>:<name>`` (DESIGN.md §10)."""


def is_schedule(watcher_id: str) -> bool:
    return watcher_id.startswith(SCHEDULE_PREFIX)


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps on what one subject (and one agent session) may hold live at once."""

    watchers: int = 1_000  # live watchers that are not schedules, proposals included
    proposals: int = 100  # pending proposals
    proposal_ttl: timedelta = timedelta(hours=24)  # a proposal not approved by then is forgotten
    schedules: int = 100  # live schedules of the subject
    session_schedules: int = 10  # live schedules one agent session created
    session_proposals: int = 10  # pending proposals of one agent session
    agent_cron_ttl: timedelta = timedelta(days=30)  # an agent's cron schedule expires by then


DEFAULT_LIMITS: Final = Limits()


@dataclass(frozen=True, slots=True)
class Room:
    """What a subject holds live, leaving out the watcher a command is about (its own
    replacement never counts against itself)."""

    watchers: int
    proposals: int
    schedules: int
    session_schedules: int
    session_proposals: int = 0

    @classmethod
    def count(
        cls, entries: Iterable[RegistryEntry], *, leaving_out: str, session_id: str | None
    ) -> Room:
        watchers = proposals = schedules = session_schedules = session_proposals = 0
        for entry in entries:
            if entry.watcher_id == leaving_out or not is_live(entry.status):
                continue
            ours = session_id is not None and entry.session_id == session_id
            if is_schedule(entry.watcher_id):
                schedules += 1
                session_schedules += ours
                continue
            watchers += 1
            if entry.status is WatcherStatus.PROPOSED:
                proposals += 1
                session_proposals += ours
        return cls(watchers, proposals, schedules, session_schedules, session_proposals)


def stale_proposals(
    view: Mapping[str, RegistryEntry], now: datetime, ttl: timedelta
) -> tuple[RegistryEntry, ...]:
    """The subject's proposals proposed ``ttl`` or longer before ``now``, by id: no longer
    approvable, counted or listed; the command processor forgets them."""
    stale = [
        entry
        for entry in view.values()
        if entry.status is WatcherStatus.PROPOSED and now >= entry.created_at + ttl
    ]
    stale.sort(key=lambda entry: entry.watcher_id)  # few, or none: sorted after the filter
    return tuple(stale)
