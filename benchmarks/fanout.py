"""Fan-out: N watchers on one (source, event type), so every event is N evaluations.

``python -m benchmarks.fanout`` measures, for N in 1, 100, 1,000 and 10,000 (``BENCH_FANOUT``,
comma-separated), a fresh world of N watchers (as ``benchmarks.evaluator`` writes them: sealed
definitions, data keys, grants for their 100 users) on one source and event type, all with the
condition ``status == "failed"``, and events of that type of which one in ten satisfies them
(mostly false). Each N gets ``max(3, BENCH_FANOUT_EVALUATIONS // N)`` events (default 20,000
evaluations), one evaluator round (``benchmarks.evaluator``'s, timed from the first batch to
the last commit), then the write-equivalent passthrough (``benchmarks.write_equivalent``: per
input, what the evaluator wrote per input, the median of three).

Reported per N: evaluations per second (wall), process CPU µs per evaluation and per event,
the write-equivalent's CPU per event and ``cpu_ratio_write_equivalent`` (its CPU ÷ the
evaluator's: 1.0 would mean evaluating costs nothing beyond writing what it writes). The
headline ``cpu_per_evaluation_1000_vs_1`` = CPU per evaluation at 1,000 watchers ÷ CPU per
event at 1 watcher (goal ≤ 2: no per-watcher overhead beyond the records written). Prints one
JSON object; ``hot_path`` names the path the run used (``VIGIL_NATIVE``). Env as
``benchmarks.evaluator``'s.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient

from benchmarks.evaluator import PARTITIONS, USERS, _evaluate, _Loader, _write_equivalent
from pipeline.crypto import generate_kek_text
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.topics import Topology
from pipeline.rules.native import path_name

__all__ = ["main"]

SOURCE = "src.fanout"
EVENT_TYPE = "type.0"


def _world(bootstrap: str, watchers: int) -> tuple[Topology, _Loader]:
    """A fresh topology with ``watchers`` watchers on SOURCE / EVENT_TYPE."""
    topology = Topology(f"bench-fo-{uuid.uuid4().hex[:8]}.", PARTITIONS)
    ensure_topics(connect_admin(bootstrap), topology)
    loader = _Loader(bootstrap, topology, f"bench{uuid.uuid4().hex[:6]}")
    for j in range(watchers):
        loader.watcher(f"u-{j % USERS}", f"f-{j}", SOURCE, EVENT_TYPE)
    for user in range(min(watchers, USERS)):
        loader.grant(f"u-{user}", [SOURCE])
    loader.flush()
    return topology, loader


def _drop(bootstrap: str, prefix: str) -> None:
    """Delete the run's topics (its sinks share the prefix)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [name for name in admin.list_topics(timeout=10).topics if name.startswith(prefix)]
    if names:
        admin.delete_topics(names)


def _one(bootstrap: str, redis_url: str, watchers: int, evaluations: int) -> dict[str, Any]:
    events = max(3, evaluations // watchers)
    topology, loader = _world(bootstrap, watchers)
    try:
        run = _evaluate(
            bootstrap, redis_url, topology, loader, [SOURCE], events, True, 0, EVENT_TYPE
        )
        equivalent = _write_equivalent(bootstrap, topology, events, events)
    finally:
        if not os.environ.get("BENCH_KEEP_TOPICS"):
            _drop(bootstrap, topology.prefix)
    done = events * watchers
    cpu_per_event = run["cpu_seconds"] / events * 1e6
    return {
        "watchers": watchers,
        "events": events,
        "evaluations": done,
        "evaluations_per_s": round(done / run["seconds"]),
        "cpu_us_per_evaluation": round(run["cpu_seconds"] / done * 1e6, 2),
        "cpu_us_per_event": round(cpu_per_event, 1),
        "main_thread_cpu_us_per_event": run["main_thread_cpu_us_per_event"],
        "outbox_entries": run["outbox_entries"],
        "write_equivalent": equivalent,
        "cpu_ratio_write_equivalent": round(equivalent["cpu_us_per_event"] / cpu_per_event, 3),
        "topology_prefix": topology.prefix,
    }


def main() -> None:
    os.environ.setdefault("VIGIL_MASTER_KEYS", generate_kek_text("bench"))
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    sizes = [int(n) for n in os.environ.get("BENCH_FANOUT", "1,100,1000,10000").split(",")]
    evaluations = int(os.environ.get("BENCH_FANOUT_EVALUATIONS", "20000"))
    began = time.monotonic()
    load = os.getloadavg()[0]
    runs = {n: _one(bootstrap, redis_url, n, evaluations) for n in sizes}
    result: dict[str, Any] = {
        "benchmark": "fanout",
        "hot_path": path_name(),
        "partitions": PARTITIONS,
        "runs": list(runs.values()),
    }
    if 1 in runs and 1000 in runs:
        ratio = runs[1000]["cpu_us_per_evaluation"] / runs[1]["cpu_us_per_event"]
        result["cpu_per_evaluation_1000_vs_1"] = round(ratio, 3)
        result["goal_cpu_per_evaluation_1000_vs_1"] = 2.0
    result["load_average_start_end"] = [round(load, 1), round(os.getloadavg()[0], 1)]
    result["wall_seconds"] = round(time.monotonic() - began, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
