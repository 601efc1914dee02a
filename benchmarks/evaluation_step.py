"""One evaluation's pure work in process, on both hot paths: CPU that a shared machine cannot blur.

``python -m benchmarks.evaluation_step`` runs, once with ``VIGIL_NATIVE=0`` and once with
``VIGIL_NATIVE=1`` (each in a fresh interpreter), what the evaluator does per matching input
between the consume and the produce, with no broker and no Redis: the event's Avro decode and
evidence, the evaluation (condition, freshness, authorization, delivery key, evidence digest,
next state; the budget verdict given), the watcher-state, receipt and (for the half that
satisfies) outbox entry written and sealed as the evaluator writes them with a real key ring,
and the outbox entry's partition. ``BENCH_WATCHERS`` (default 1,000) watchers on one source
take ``BENCH_INPUTS`` (default 2,000) events in turn; process CPU per input is the minimum of
``BENCH_REPEATS`` (default 5) passes. The decode and the writing are the evaluator's own
(``Evaluator.decode`` and ``Evaluator._write``, producing into nothing), the writing once per
``BENCH_BATCH`` (default 500) decisions, as the evaluator writes a batch's (on the native path,
one fused call each). Prints one JSON object:
each path's µs per input and the ratio. Leaves out what the broker, librdkafka and Redis cost
(``benchmarks.evaluator``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["main"]


class _Message:
    """An input record as the runtime hands it to ``Evaluator.decode``."""

    def __init__(self, topic: str, offset: int, value: bytes) -> None:
        self._topic, self._offset, self._value = topic, offset, value

    def value(self) -> bytes:
        return self._value

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


def _world(watchers: int, inputs: int) -> tuple[Any, ...]:
    """An evaluator (no broker, no Redis: its budget gate is given), its watchers with their
    data keys, and ``inputs`` encoded events of their source."""
    from consumers.evaluator.loop import Evaluator, _Task, table_specs
    from pipeline.crypto import KeyEncryptionKeys, generate_kek_text
    from pipeline.kafka.partitioner import partition_for
    from pipeline.kafka.topics import Topic, Topology
    from pipeline.records.watcher import Watch
    from pipeline.rules.authz import Action, Grant
    from pipeline.rules.budgets import BudgetCaps
    from pipeline.rules.data_keys import evidence_owner, subject_owner
    from pipeline.rules.definition import WatcherDefinition
    from pipeline.rules.evaluation import authorization_for
    from pipeline.rules.keys import canonical_json, watcher_key
    from pipeline.rules.lifecycle import WatcherStatus
    from pipeline.rules.watcher_state import WatcherState
    from pipeline.runtime.processing import ProcessContext
    from pipeline.runtime.state import TaskState
    from pipeline.runtime.tables import Table, TableKind, TableReader, TableSpec

    now = datetime.now(UTC)
    topology = Topology("bench.", 4)
    keks = KeyEncryptionKeys.parse(generate_kek_text("bench"))
    caps = BudgetCaps(window=timedelta(hours=1))
    budgets: Any = None  # the gate is given: Redis is never asked
    tables = TaskState(table_specs(topology), TableReader({}), lambda _topic: 4)  # never read
    evaluator = Evaluator(topology, budgets, caps, tables, keks=keks, metrics=_metrics())
    ring, codec = evaluator._ring, evaluator.codec
    grant = Grant(
        grant_id="g",
        tenant_id="bench",
        user_id="u",
        purpose="ops.alert",
        sources=frozenset({"src"}),
        actions=frozenset({Action.EVALUATE}),
        until=now + timedelta(days=1),
    )
    ring.create(subject_owner("bench", "u"), now)
    world = []
    for j in range(watchers):
        body: dict[str, Any] = {
            "watcher_id": f"w-{j}",
            "purpose": "ops.alert",
            "source": {"kind": "event", "source_id": "src", "event_type": "t", "max_age": "1h"},
            "condition": {"eq": ["status", "failed"]},
            "delivery": {"target": "ops-hook", "verb": "notify"},
            "expires_at": "2030-01-01T00:00:00Z",
            "privacy": {"retain_paths": ["status"]},
        }
        definition = WatcherDefinition.from_json(body, tenant_id="bench", user_id="u")
        text = canonical_json(definition.with_version(1).to_json()).decode()
        parts = ("bench", "u", f"w-{j}")
        watch = Watch(
            watcher_key(*parts), parts, "src", "t", 1, 1, WatcherStatus.ACTIVE, None, text
        )
        watch.definition.compile()
        ring.create(evidence_owner("bench", "u", f"w-{j}", 1), now)
        allowed = authorization_for(watch.definition, [grant], now)
        world.append((watch, WatcherState(version=1, status=WatcherStatus.ACTIVE), allowed))
    events_topic = topology.name(Topic.EVENTS)
    events = [
        _Message(
            events_topic,
            i,
            codec.encode(
                "event",
                {
                    "source_id": "src",
                    "event_type": "t",
                    "event_id": f"e-{i}",
                    "envelope_id": None,
                    "cursor": str(i),
                    "observed_at": now,
                    "payload": canonical_json({"status": "failed" if i % 2 else "ok"}).decode(),
                },
            ),
        )
        for i in range(inputs)
    ]
    state = Table(TableSpec("watcher-state", "watcher-state", TableKind.OWNED), 0)
    task = _Task(None, state)  # type: ignore[arg-type]  # _write reads only the state table
    ctx = ProcessContext(
        0,
        lambda *args, **kw: None,  # produced into nothing
        lambda _s: 0,
        lambda _name, _partition: state,
        lambda _topic, key: partition_for(key or b"", 4),
    )
    return evaluator, ctx, task, world, events, now


def _metrics() -> Any:
    from prometheus_client import CollectorRegistry

    from consumers.evaluator.metrics import evaluator_metrics

    return evaluator_metrics(CollectorRegistry())


def _pass(
    evaluator: Any, ctx: Any, task: Any, world: list[Any], events: list[_Message], now: datetime
) -> None:
    """Every event through one watcher in turn, as the evaluator decodes, decides and writes."""
    from pipeline.rules.budgets import BudgetVerdict
    from pipeline.rules.evaluation import evaluate, recorded_budget

    gate = recorded_budget(BudgetVerdict.OK)
    batch = int(os.environ.get("BENCH_BATCH", "500"))
    decided = []
    for i, msg in enumerate(events):
        watch, state, allowed = world[i % len(world)]
        evidence = evaluator.decode(msg).evidence
        result = evaluate(watch.definition, state, evidence, (), now, gate, authorization=allowed)
        decided.append((watch, state, result))
        if len(decided) == batch:
            evaluator._write(ctx, task, decided, now)
            decided = []
    evaluator._write(ctx, task, decided, now)


def _one() -> dict[str, Any]:
    from pipeline.rules.native import path_name

    watchers = int(os.environ.get("BENCH_WATCHERS", "1000"))
    inputs = int(os.environ.get("BENCH_INPUTS", "2000"))
    repeats = int(os.environ.get("BENCH_REPEATS", "5"))
    world = _world(watchers, inputs)
    _pass(*world)  # warm: caches, ciphers
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        _pass(*world)
        best = min(best, time.process_time() - started)
    return {"hot_path": path_name(), "cpu_us_per_input": round(best / inputs * 1e6, 2)}


def main() -> None:
    if "--one" in sys.argv:
        print(json.dumps(_one()))
        return
    runs = {}
    load = os.getloadavg()[0]
    for choice in ("0", "1"):
        env = {**os.environ, "VIGIL_NATIVE": choice}
        command = [sys.executable, "-m", "benchmarks.evaluation_step", "--one"]
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        result = json.loads(out.stdout)
        runs[result["hot_path"]] = result["cpu_us_per_input"]
    python, native = runs["python"], runs["native"]
    print(
        json.dumps(
            {
                "benchmark": "evaluation_step",
                "cpu_us_per_input": runs,
                "native_vs_python": round(native / python, 3),
                "load_average_start_end": [round(load, 1), round(os.getloadavg()[0], 1)],
            }
        )
    )


if __name__ == "__main__":
    main()
