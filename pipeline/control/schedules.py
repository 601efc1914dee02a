"""Schedules as the control plane shows them: timing flags → a schedule source, and a schedule
watcher → its ``list --json`` entry (seed 001, DESIGN.md §5, §8, §10).

Pure over ``now`` and the subject's zone: ``--in`` counts whole seconds up from ``now``; ``--at``
and ``--cron`` are local wall time (ambiguous: first occurrence; nonexistent or past: refused). Owns
:func:`last_fire` and :func:`next_look`. Left out: creating and cancelling (``dispatch``) and
reading receipts (``http.backend``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pipeline.control.verbs import ScheduleRequest, action_argv, parse_action
from pipeline.rules.cron import CronSchedule, OneShot, next_fire, one_shot_status
from pipeline.rules.durations import parse_duration
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import parse_instant, rfc3339_seconds, utc
from pipeline.rules.sources import PollingSource
from pipeline.rules.ticker import DEFAULT_GRACE
from pipeline.rules.zones import parse_at

__all__ = ["last_fire", "next_look", "schedule_id", "schedule_view", "timing_source"]


def schedule_id(chat: str, name: str) -> str:
    return f"schedule:{chat}:{name}"


def timing_source(request: ScheduleRequest, now: datetime, zone: ZoneInfo) -> dict[str, Any]:
    """The schedule source: ``--in`` from now (whole seconds, rounded up), ``--at`` and
    ``--cron`` on the local wall clock of the subject's zone."""
    if request.cron is not None:
        CronSchedule.parse(request.cron, zone.key, "cron")
        return {"kind": "schedule", "cron": request.cron, "timezone": zone.key}
    if request.in_ is not None:
        at = _ceil_second(utc(now) + parse_duration(request.in_, "in"))
    else:
        at = parse_at(request.at or "", zone, "at")
        if at <= now:
            raise DefinitionError(f"{rfc3339_seconds(at)} has already passed", "at")
    return {"kind": "schedule", "at": rfc3339_seconds(at)}


def schedule_view(watcher: dict[str, Any], now: datetime) -> dict[str, Any] | None:
    """A schedule watcher as ``list --json`` shows it: ``{name, chat, schedule, argv,
    created_at, next_fire}``; None for what is not a control-plane schedule."""
    definition = watcher.get("definition") or {}
    watcher_id = str(watcher.get("watcher_id", ""))
    parts = watcher_id.split(":")
    if len(parts) != 3 or parts[0] != "schedule":
        return None
    source = definition.get("source") or {}
    delivery = definition.get("delivery") or {}
    argv_list = [delivery.get("verb", "")]
    argv_list += list(delivery.get("args") or [delivery.get("text", "")])
    try:
        argv = action_argv(parse_action(argv_list))
    except DefinitionError:
        argv = argv_list
    if source.get("cron"):
        schedule = {"cron": source["cron"], "timezone": source.get("timezone")}
        fire: datetime | None = next_fire(
            CronSchedule.parse(source["cron"], source.get("timezone") or "UTC"), now
        )
    else:
        at = parse_instant(str(source.get("at")), "at")
        schedule = {"at": rfc3339_seconds(at)}
        fire = at
    return {
        "name": parts[2],
        "chat": parts[1],
        "schedule": schedule,
        "argv": argv,
        "created_at": watcher.get("created_at"),
        "next_fire": None if fire is None else rfc3339_seconds(fire),
    }


def last_fire(receipt: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A schedule's newest receipt (as the API shows receipts) as its last fire: ``{due_at,
    fired_at, late, outcome}``; None when there is none or it names no due instant."""
    if receipt is None:
        return None
    trigger = receipt.get("trigger")
    due_text = trigger.get("scheduled_at") if isinstance(trigger, Mapping) else None
    try:
        due = parse_instant(str(due_text), "scheduled_at")
        fired = parse_instant(str(receipt.get("observed_at")), "observed_at")
    except DefinitionError:
        return None
    return {
        "due_at": rfc3339_seconds(due),
        "fired_at": rfc3339_seconds(fired),
        "late": one_shot_status(due, fired, grace=DEFAULT_GRACE) is OneShot.LATE,
        "outcome": receipt.get("outcome"),
    }


def next_look(definition: Mapping[str, Any], now: datetime) -> str | None:
    """When a watcher next looks by its definition: a polling source's next cron or cadence
    instant, a schedule's next fire (an ``at`` still ahead, or the cron's next); None for
    events (they look on each one) and anything that does not parse."""
    source = definition.get("source")
    if not isinstance(source, Mapping):
        return None
    fire: datetime | None
    try:
        match source.get("kind"):
            case "polling":
                fire = next_fire(PollingSource.model_validate(source).schedule, now)
            case "schedule" if source.get("cron"):
                zone = str(source.get("timezone") or "UTC")
                fire = next_fire(CronSchedule.parse(str(source["cron"]), zone), now)
            case "schedule":
                at = parse_instant(str(source.get("at")), "at")
                fire = at if at > now else None
            case _:
                fire = None
    except (DefinitionError, ValueError):  # pydantic's ValidationError is a ValueError
        return None
    return None if fire is None else rfc3339_seconds(fire)


def _ceil_second(instant: datetime) -> datetime:
    if instant.microsecond:
        return instant.replace(microsecond=0) + timedelta(seconds=1)
    return instant
