"""The poll ticker's planning hot path over one minute for 100,000 polling watchers.

What the ticker does each step, without Kafka: pop the watchers whose next check has come from
the :class:`~producers.ticker.agenda.Agenda`, :func:`~pipeline.rules.ticker.plan_watcher` each with
its memory, keep the new memory and next check. The clock advances one second per step for one
minute (60 steps), as ``vigil ticker`` steps; every watcher has a one-minute cadence or cron, in
several zones and missed-run policies, so each one falls due once in the minute. Each watcher has
its own definition (own id, own expiry, spread over a year); they are copies of a few parsed shapes,
because a ticker decodes each definition once, not per minute.

Baseline, in the same run: for each watcher, ask cronsim (Debian cron's DST rules, the engine
DESIGN.md §8 names) for its instants in the same minute, once per watcher — no per-second
stepping, no policy, no memory. Prints one JSON object; run ``python -m benchmarks.ticker``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from itertools import cycle, islice
from typing import Any

from cronsim import CronSim

from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.sources import PollingSource
from pipeline.rules.ticker import TickerMemory, plan_watcher
from producers.ticker.agenda import Agenda

__all__ = ["main"]

WATCHERS = 100_000
START = datetime(2026, 11, 29, 9, 59, 30, tzinfo=UTC)
MINUTE_START = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "Australia/Lord_Howe")
MISSED: tuple[Any, ...] = ("skip", "latest", {"bounded": 3})
EXPIRY = datetime(2026, 12, 1, tzinfo=UTC)


def _definitions() -> list[WatcherDefinition]:
    shapes: list[WatcherDefinition] = []
    for index, (zone, missed) in enumerate((z, m) for z in ZONES for m in MISSED):
        source = {
            "kind": "polling",
            "source_id": f"status.{index}",
            "tool": "http.json@v1",
            "tool_ref": "status-page",
            "cron": "* * * * *",
            "timezone": zone,
            "missed": missed,
            "max_age": "10m",
        }
        shapes.append(_definition(f"w-{index}", source))
    cadence = {
        "kind": "polling",
        "source_id": "run:r-1",
        "tool": "workflow.run.status@v1",
        "target": "r-1",
        "cadence": "1m",
        "max_age": "2m",
    }
    shapes.append(_definition("w-cadence", cadence))
    return shapes


def _definition(watcher_id: str, source: dict[str, Any]) -> WatcherDefinition:
    body = {
        "watcher_id": watcher_id,
        "purpose": "ops.alert",
        "source": source,
        "condition": {"eq": ["status", "down"]},
        "delivery": {"target": "ops-hook"},
        "expires_at": "2027-06-01T00:00:00Z",
    }
    return WatcherDefinition.from_json(body, tenant_id="acme", user_id="u-1").with_version(1)


def _ticker_minute(definitions: list[WatcherDefinition]) -> tuple[float, float, int, int]:
    """(wall s, CPU s, due instants, planned) for 60 one-second steps after a warm start."""
    memory: dict[int, TickerMemory] = {}
    agenda: Agenda[int] = Agenda()
    for key, definition in enumerate(definitions):  # first sight: memory and next check
        plan = plan_watcher(definition, WatcherStatus.ACTIVE, START, None, START)
        memory[key] = plan.memory
        agenda.set(key, plan.next_check)
    active = WatcherStatus.ACTIVE
    due = planned = 0
    started, cpu = time.perf_counter(), time.process_time()
    for second in range(60):
        now = MINUTE_START + timedelta(seconds=second, milliseconds=300)
        for key in agenda.due(now):
            plan = plan_watcher(definitions[key], active, START, memory[key], now)
            memory[key] = plan.memory
            agenda.set(key, plan.next_check)
            due += len(plan.ticks)
            planned += 1
    return time.perf_counter() - started, time.process_time() - cpu, due, planned


def _cronsim_minute(definitions: list[WatcherDefinition]) -> tuple[float, float, int]:
    until = MINUTE_START + timedelta(seconds=59, milliseconds=300)
    started, cpu = time.perf_counter(), time.process_time()
    due = 0
    for definition in definitions:
        source = definition.source
        assert isinstance(source, PollingSource)
        zone = source.schedule.zone
        for fire in CronSim(source.cron_expression, START.astimezone(zone)):
            if fire > until:
                break
            due += 1
    return time.perf_counter() - started, time.process_time() - cpu, due


def _watchers() -> list[WatcherDefinition]:
    shapes = islice(cycle(_definitions()), WATCHERS)
    return [
        shape.model_copy(
            update={
                "watcher_id": f"w-{n}",
                "expires_at": EXPIRY + timedelta(minutes=n * 5),
            }
        )
        for n, shape in enumerate(shapes)
    ]


def main() -> None:
    definitions = _watchers()
    seconds, cpu, due, planned = _ticker_minute(definitions)
    base_seconds, base_cpu, base_due = _cronsim_minute(definitions)
    print(
        json.dumps(
            {
                "benchmark": "ticker",
                "watchers": WATCHERS,
                "steps": 60,
                "due_instants": due,
                "planned": planned,
                "seconds": round(seconds, 4),
                "cpu_seconds": round(cpu, 4),
                "due_instants_per_second": round(due / seconds),
                "due_instants_per_cpu_second": round(due / cpu),
                "goal_one_minute_under_one_cpu_second": cpu < 1.0,
                "baseline": {
                    "engine": "cronsim, one enumeration per watcher for the minute",
                    "due_instants": base_due,
                    "seconds": round(base_seconds, 4),
                    "cpu_seconds": round(base_cpu, 4),
                    "due_instants_per_second": round(base_due / base_seconds),
                    "due_instants_per_cpu_second": round(base_due / base_cpu),
                },
                "ratio": round((due / cpu) / (base_due / base_cpu), 2),
            }
        )
    )


if __name__ == "__main__":
    main()
