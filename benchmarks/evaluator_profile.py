"""Where the evaluator's CPU goes: ``benchmarks.evaluator``'s main phase under cProfile.

``python -m benchmarks.evaluator_profile`` builds the same world (10,000 watchers on 1,000
sources, every event matching one), indexes and compiles it, then profiles only the stream
app's steps over ``BENCH_EVENTS`` (default 10000) events: group join, loading and indexing are
left out, as in the benchmark. Prints one JSON object: events/s and CPU per event of the
profiled run (cProfile slows small calls, so read shares, not absolute times), and the
``BENCH_TOP`` (default 25) functions by cumulative and by own time, with their share of the
profiled steps. Env: ``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL``, as for the benchmark.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
from typing import Any

from confluent_kafka.admin import AdminClient

from benchmarks.evaluator import _evaluate, _world
from consumers.evaluator.loop import Evaluator
from pipeline.runtime.app import StreamApp

__all__ = ["main"]


def _top(stats: pstats.Stats, key: int, total: float, n: int) -> list[dict[str, Any]]:
    """The ``n`` rows of ``stats`` with the largest ``key`` (2: own time, 3: cumulative)."""
    rows = sorted(stats.stats.items(), key=lambda item: item[1][key], reverse=True)[:n]  # type: ignore[attr-defined]
    return [
        {
            "function": f"{name} ({os.path.basename(path)}:{line})",
            "calls": calls,
            "share": round(row[key] / total, 3),
        }
        for (path, line, name), row in rows
        for calls in [row[1]]
    ]


def main() -> None:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    n = int(os.environ.get("BENCH_EVENTS", "10000"))
    top = int(os.environ.get("BENCH_TOP", "25"))
    topology, loader, sources = _world(bootstrap, 1_000, 0)
    profile = cProfile.Profile()
    step, prepare = StreamApp.step, Evaluator.prepare
    armed = [False]  # steps before the index is built (group join, restore) are not profiled

    def prepared(self: Evaluator, compile_definitions: bool = False) -> int:
        found = prepare(self, compile_definitions)
        armed[0] = True
        return found

    def profiled(self: StreamApp, timeout: float = 0.05) -> int:
        if not armed[0]:
            return step(self, timeout)
        profile.enable()
        try:
            return step(self, timeout)
        finally:
            profile.disable()

    StreamApp.step = profiled  # type: ignore[method-assign]
    Evaluator.prepare = prepared  # type: ignore[method-assign]
    try:
        run = _evaluate(bootstrap, redis_url, topology, loader, sources, n, compiled=True)
    finally:
        StreamApp.step, Evaluator.prepare = step, prepare  # type: ignore[method-assign]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(topology.prefix)]
    admin.delete_topics(names)
    stats = pstats.Stats(profile)
    total = max(row[3] for row in stats.stats.values())  # type: ignore[attr-defined]
    print(
        json.dumps(
            {
                "benchmark": "evaluator_profile",
                "events": n,
                "profiled_run": run,
                "profiled_seconds": round(total, 3),
                "by_cumulative": _top(stats, 3, total, top),
                "by_own_time": _top(stats, 2, total, top),
            }
        )
    )


if __name__ == "__main__":
    main()
