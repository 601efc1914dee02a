"""Due-instant enumeration for polling watchers: ``plan_due`` against cronsim called directly.

Runs one ticker step (one minute) for 100,000 watchers spread over a few (cron, zone) pairs and
prints one JSON object: watchers planned and due instants enumerated per second, for vigil's
``plan_due`` (per-day slot memo plus a per-(cron, zone, step) plan memo), for ``plan_due`` with
the plan memo bypassed (day memo only), and for a baseline loop that asks cronsim for each
watcher's instants in the same step. Run: ``python -m benchmarks.cron``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from itertools import cycle, islice
from zoneinfo import ZoneInfo

from cronsim import CronSim

from pipeline.rules import cron
from pipeline.rules.cron import CronSchedule, MissedPolicy, plan_due

__all__ = ["main"]

WATCHERS = 100_000
BASELINE_WATCHERS = 20_000
EXPRESSIONS = ("* * * * *", "*/5 * * * *", "0 * * * *")
ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "Australia/Lord_Howe")
LAST = datetime(2026, 11, 29, 9, 59, tzinfo=UTC)
NOW = LAST + timedelta(minutes=1, seconds=1)


def _schedules(count: int) -> list[CronSchedule]:
    pairs = [CronSchedule.parse(e, z) for e in EXPRESSIONS for z in ZONES]
    return list(islice(cycle(pairs), count))


def _run_plan(schedules: list[CronSchedule], policy: MissedPolicy) -> tuple[float, int]:
    started = time.perf_counter()
    fired = sum(len(plan_due(s, LAST, NOW, policy).fire) for s in schedules)
    return time.perf_counter() - started, fired


def _run_no_plan_memo(schedules: list[CronSchedule], policy: MissedPolicy) -> tuple[float, int]:
    started = time.perf_counter()
    fired = 0
    for sched in schedules:
        cron._plan.cache_clear()
        fired += len(plan_due(sched, LAST, NOW, policy).fire)
    return time.perf_counter() - started, fired


def _run_cronsim(schedules: list[CronSchedule]) -> tuple[float, int]:
    started = time.perf_counter()
    fired = 0
    for sched in schedules:
        for fire in CronSim(sched.expr, LAST.astimezone(ZoneInfo(sched.zone.key))):
            if fire > NOW:
                break
            fired += 1
    return time.perf_counter() - started, fired


def main() -> None:
    policy = MissedPolicy.parse("latest")
    schedules = _schedules(WATCHERS)
    warm = _schedules(len(EXPRESSIONS) * len(ZONES))
    _run_plan(warm, policy)  # imports, zone loads, first day chunks
    memo_s, memo_fired = _run_plan(schedules, policy)
    day_memo_s, day_memo_fired = _run_no_plan_memo(schedules[:BASELINE_WATCHERS], policy)
    base_s, base_fired = _run_cronsim(schedules[:BASELINE_WATCHERS])
    assert day_memo_fired == base_fired, "vigil and cronsim disagree on the due instants"
    memo_rate = memo_fired / memo_s
    base_rate = base_fired / base_s
    print(
        json.dumps(
            {
                "benchmark": "cron_due_instants",
                "watchers": WATCHERS,
                "step": "60s",
                "pairs": len(EXPRESSIONS) * len(ZONES),
                "plan_due_seconds": round(memo_s, 4),
                "plan_due_watchers_per_s": round(WATCHERS / memo_s),
                "plan_due_instants_per_s": round(memo_rate),
                "plan_due_instants": memo_fired,
                "day_memo_only_watchers_per_s": round(BASELINE_WATCHERS / day_memo_s),
                "day_memo_only_instants_per_s": round(day_memo_fired / day_memo_s),
                "baseline_cronsim_watchers": BASELINE_WATCHERS,
                "baseline_cronsim_watchers_per_s": round(BASELINE_WATCHERS / base_s),
                "baseline_cronsim_instants_per_s": round(base_rate),
                "ratio_plan_due_vs_cronsim": round(memo_rate / base_rate, 1),
                "ratio_day_memo_only_vs_cronsim": round(
                    (day_memo_fired / day_memo_s) / base_rate, 1
                ),
                "goal_one_minute_under_1s": memo_s < 1.0,
            }
        )
    )


if __name__ == "__main__":
    main()
