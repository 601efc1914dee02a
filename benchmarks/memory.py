"""Memory under input that never repeats stays flat (DESIGN.md §10 "Limits").

``python -m benchmarks.memory`` prints one JSON object with two cases, each against a baseline
measured in the same run:

1. ``source_ids``: the evaluator, on the real broker and Redis, over 10^5 events whose source
   ids are all distinct (no watcher matches them: the work is routing). After every 20,000
   events it records the Python heap (``tracemalloc``, so librdkafka's buffers do not blur it)
   and the entries of the evaluator's source-id memo. ``heap_growth_last_half_kib`` is the heap
   growth over the second half of the run (flat: the memo is bounded). The baseline
   ``unbounded_memo_kib`` is what a plain dict of the same 10^5 ids costs — what the memo grew to
   before it was bounded.
2. ``refused_charges``: one budget window in Redis, exhausted, then a flood of 10^5 charges with
   distinct idempotency tokens, all refused: the window's hash before and after (``HLEN``,
   ``MEMORY USAGE``). The baseline: the same number of accepted charges on an uncapped window,
   each of which does keep its token for the window (that is what makes a retry count once).

Env: ``KAFKA_BOOTSTRAP_SERVERS`` (127.0.0.1:9092), ``REDIS_URL`` (redis://127.0.0.1:6379/0),
``BENCH_SOURCE_IDS`` (100000), ``BENCH_CHARGES`` (100000). The first case takes about a minute.
(Part of issue 14's limits; the proposals-per-session case lives with the caps it measures.)
"""

from __future__ import annotations

import json
import os
import sys
import time
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from consumers.evaluator.stage import EvaluatorDeps, EvaluatorSettings, EvaluatorStage
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.clients import producer_config
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import BudgetCaps, BudgetScope, BudgetVerdict, Charge, Dimension

__all__ = ["main", "refused_charges", "source_ids"]

PARTITIONS = 2
PHASES = 5
KIB = 1024


def _events(producer: Producer, topology: Topology, start: int, count: int) -> None:
    registry = default_codec()
    topic = topology.name(Topic.EVENTS)
    now = datetime.now(UTC)
    for i in range(start, start + count):
        source = f"src-{i:07d}"
        value = registry.encode(
            "event",
            {
                "source_id": source,
                "event_type": "tick",
                "event_id": f"e-{i}",
                "envelope_id": None,
                "cursor": None,
                "observed_at": now,
                "payload": "{}",
            },
        )
        while True:
            try:
                producer.produce(topic, value, source, partition_for(source, PARTITIONS))
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def source_ids(bootstrap: str, redis_url: str, total: int) -> dict[str, Any]:
    """The evaluator's heap while ``total`` distinct source ids pass through it."""
    topology = Topology(f"bench-mem-{uuid.uuid4().hex[:8]}.", PARTITIONS)
    ensure_topics(connect_admin(bootstrap), topology)
    registry = CollectorRegistry()
    budgets = RedisBudgets(redis.Redis.from_url(redis_url), key_prefix=f"bench:{topology.prefix}")
    caps = BudgetCaps(window=timedelta(hours=1))
    settings = EvaluatorSettings(bootstrap, topology, "bench", default_caps=caps)
    stage = EvaluatorStage(settings, EvaluatorDeps(budgets, metrics_registry=registry))
    app, evaluator = stage.app, stage.evaluator
    labels = {"group": app.group_id, "topic": topology.name(Topic.EVENTS)}
    overrides: dict[str, Any] = {"linger.ms": 50}
    producer = Producer(producer_config(bootstrap, **overrides))

    def consumed() -> float:
        return registry.get_sample_value("vigil_runtime_records_consumed_total", labels) or 0.0

    phase = total // PHASES
    heap: list[int] = []
    memo: list[int] = []
    tracemalloc.start()
    with app:
        deadline = time.monotonic() + 60
        while len(app.assignment()) < 2 * PARTITIONS and time.monotonic() < deadline:
            app.step()
        for n in range(PHASES):
            _events(producer, topology, n * phase, phase)
            while consumed() < (n + 1) * phase:
                app.step()
            app.transaction().commit()
            heap.append(tracemalloc.get_traced_memory()[0])
            memo.append(len(evaluator._home))  # the memo keyed by input: what must stay bounded
    tracemalloc.stop()
    budgets.close()
    ids = {f"src-{i:07d}": i % PARTITIONS for i in range(total)}
    unbounded = sys.getsizeof(ids) + sum(sys.getsizeof(k) for k in ids)
    half = PHASES // 2
    return {
        "events": total,
        "after_events": [phase * (n + 1) for n in range(PHASES)],
        "python_heap_kib": [round(h / KIB) for h in heap],
        "memo_entries": memo,
        "heap_growth_last_half_kib": round((heap[-1] - heap[half]) / KIB),
        "unbounded_memo_kib": round(unbounded / KIB),
    }


def refused_charges(redis_url: str, total: int) -> dict[str, Any]:
    """One exhausted window, flooded with refused charges; accepted ones as the baseline."""
    client = redis.Redis.from_url(redis_url)
    prefix = f"bench:mem:{uuid.uuid4().hex[:8]}:"
    budgets = RedisBudgets(client, key_prefix=prefix)
    now = datetime.now(UTC)
    scope = BudgetScope("acme", "u-1", "w-1")
    capped = BudgetCaps(window=timedelta(hours=1), deliveries=1)
    key = budgets.window_key(scope, capped, now)
    budgets.charge(scope, capped, {Dimension.DELIVERIES: 1}, "first", now)

    def measure(window_key: str) -> tuple[int, int]:
        return int(client.hlen(window_key)), int(client.memory_usage(window_key) or 0)

    def flood(caps: BudgetCaps, tag: str) -> int:
        refused = 0
        batch = 1_000
        for start in range(0, total, batch):
            charges = [
                Charge(scope, caps, {Dimension.DELIVERIES: 1}, f"{tag}:{i}")
                for i in range(start, min(total, start + batch))
            ]
            checks = budgets.charge_many(charges, now)
            refused += sum(c.verdict is BudgetVerdict.EXHAUSTED for c in checks)
        return refused

    before = measure(key)
    refused = flood(capped, "flood")
    after = measure(key)
    open_caps = BudgetCaps(window=timedelta(hours=2))
    accepted_key = budgets.window_key(scope, open_caps, now)
    flood(open_caps, "ok")
    accepted = measure(accepted_key)
    for window_key in (key, accepted_key):
        client.delete(window_key)
    budgets.close()
    return {
        "charges": total,
        "refused": refused,
        "hash_fields_before": before[0],
        "hash_fields_after": after[0],
        "hash_bytes_before": before[1],
        "hash_bytes_after": after[1],
        "baseline_accepted_hash_fields": accepted[0],
        "baseline_accepted_hash_bytes": accepted[1],
    }


def main() -> None:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    ids = int(os.environ.get("BENCH_SOURCE_IDS", "100000"))
    charges = int(os.environ.get("BENCH_CHARGES", "100000"))
    print(
        json.dumps(
            {
                "benchmark": "memory",
                "refused_charges": refused_charges(redis_url, charges),
                "source_ids": source_ids(bootstrap, redis_url, ids),
            }
        )
    )


if __name__ == "__main__":
    main()
