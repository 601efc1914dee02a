"""One evaluation's pure work in process, on both hot paths: CPU that a shared machine cannot blur.

``python -m benchmarks.evaluation_step`` runs, once with ``VIGIL_NATIVE=0`` and once with
``VIGIL_NATIVE=1`` (each in a fresh interpreter), what the evaluator does per matching input
between the consume and the produce, with no broker and no Redis: the event's Avro decode and
evidence, the evaluation (condition, freshness, authorization, delivery key, evidence digest,
next state; the budget verdict given), the watcher-state, receipt and (for the half that
satisfies) outbox entry written and sealed as the evaluator writes them with a real key ring,
and the outbox entry's partition. ``BENCH_WATCHERS`` (default 1,000) watchers on one source
take ``BENCH_INPUTS`` (default 2,000) events in turn; process CPU per input is the minimum of
``BENCH_REPEATS`` (default 5) passes. Prints one JSON object: each path's µs per input and
the ratio. Leaves out what the broker, librdkafka and Redis cost (``benchmarks.evaluator``).
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


def _world(watchers: int, inputs: int) -> tuple[Any, ...]:
    from pipeline.crypto import KeyEncryptionKeys, KeyRing, generate_kek_text
    from pipeline.kafka.serde import default_registry
    from pipeline.rules.authz import Action, Grant
    from pipeline.rules.data_keys import evidence_owner, subject_owner
    from pipeline.rules.definition import WatcherDefinition
    from pipeline.rules.evaluation import authorization_for
    from pipeline.rules.keys import canonical_json
    from pipeline.rules.lifecycle import WatcherStatus
    from pipeline.rules.watcher_state import WatcherState

    registry = default_registry()
    now = datetime.now(UTC)
    ring = KeyRing(KeyEncryptionKeys.parse(generate_kek_text("bench")), registry)
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
        definition = definition.with_version(1)
        definition.compile()
        ring.create(evidence_owner("bench", "u", f"w-{j}", 1), now)
        allowed = authorization_for(definition, [grant], now)
        world.append((definition, WatcherState(version=1, status=WatcherStatus.ACTIVE), allowed))
    events = [
        registry.encode(
            "event",
            {
                "source_id": "src",
                "event_type": "t",
                "event_id": f"e-{i}",
                "envelope_id": None,
                "cursor": str(i),
                "observed_at": now,
                "payload": canonical_json({"status": "failed" if i % 2 else "ok", "n": i}).decode(),
            },
        )
        for i in range(inputs)
    ]
    return registry, ring, world, events, now


def _pass(registry: Any, ring: Any, world: list[Any], events: list[bytes], now: datetime) -> None:
    """Every event through one watcher in turn, as the evaluator decodes, decides and writes."""
    from pipeline.kafka.partitioner import partition_for
    from pipeline.records.codec import json_text
    from pipeline.records.event import evidence_from_event
    from pipeline.records.outbox_entry import encode_outbox_entry
    from pipeline.records.receipt import encode_receipt
    from pipeline.records.watcher_state import encode_state
    from pipeline.rules.budgets import BudgetVerdict
    from pipeline.rules.evaluation import evaluate, recorded_budget

    gate = recorded_budget(BudgetVerdict.OK)
    for i, raw in enumerate(events):
        definition, state, allowed = world[i % len(world)]
        _, value = registry.decode(raw)
        evidence = evidence_from_event(value, f"events:0:{i}")
        result = evaluate(definition, state, evidence, (), now, gate, authorization=allowed)
        receipt = result.receipt_fields
        text = json_text(receipt["trigger"], "trigger")
        parts = (definition.tenant_id, definition.user_id, definition.watcher_id)
        encode_state(registry, parts, "src", result.next_state, now, text)
        encode_receipt(registry, ring, receipt, "src", text, now)
        if result.outbox_fields is not None:
            encode_outbox_entry(registry, ring, result.outbox_fields, text)
            partition_for(result.outbox_fields["delivery_key"], 12)


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
