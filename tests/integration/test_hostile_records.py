"""Hostile records through the real evaluator and poll ticker (DESIGN.md §2, §10 "Hostile input",
"Schema upgrades"), on the real broker and Redis.

Well over a thousand hostile records — forged schema fingerprints registered nowhere, random
bytes, cut and padded Avro, payloads nested past the bound, 20,000-digit and unsafe integers,
NaN, non-object and oversized payloads, over-long ids, instants in year 1, records of the wrong
type, tombstones, and ticks just as bad — are mixed into the same partitions as good events and
pinned run states. Every good event is decided (it has a receipt), every hostile record is
dead-lettered exactly once with the reason for its kind, neither process raises, no partition
is paused, and the evaluator's committed offsets reach the end of every input partition.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from pipeline.clock import ManualClock
from pipeline.kafka.clients import table_consumer_config
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.topics import DLQ_OFFSET, DLQ_PARTITION, DLQ_REASON, DLQ_TOPIC, Topic
from pipeline.records.receipt import decode_receipt
from pipeline.rules.definition import WatcherDefinition
from tests.integration.evaluator_helpers import current_ring
from tests.integration.runtime_helpers import read_all
from tests.integration.ticker_helpers import (
    CODEC,
    PARTITIONS,
    TENANT,
    USER,
    Deployment,
    Pipeline,
    polling_definition,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SOURCE, TYPE, RUN = "ci.pipeline", "build.finished", "r-1"
GOOD_EVENTS = 300


def event_value(now: datetime, event_id: str, **overrides: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "source_id": SOURCE,
        "event_type": TYPE,
        "event_id": event_id,
        "envelope_id": None,
        "cursor": None,
        "observed_at": now,
        "payload": json.dumps({"status": "failed" if event_id.endswith("0") else "passed"}),
    }
    value.update(overrides)
    return value


def tick_value(now: datetime, **overrides: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "kind": "poll",
        "tenant_id": TENANT,
        "user_id": USER,
        "watcher_id": "run-poll",
        "watcher_version": 1,
        "source_id": f"run:{RUN}",
        "scheduled_at": now,
        "observed_at": now,
        "payload": "{}",
        "tool_error": None,
        "usage_tokens": 0,
        "usage_micro_usd": 0,
        "late": False,
    }
    value.update(overrides)
    return value


def nested_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


Hostile = tuple[Topic, bytes | None, str]  # where, the value, what its reason must say


def hostile_records(now: datetime) -> list[Hostile]:
    """Each kind of hostile record, many times over; the last field is a reason fragment."""
    rng = random.Random(14)
    event = CODEC.encode("event", event_value(now, "e-proto"))
    out: list[Hostile] = []

    def many(count: int, make: Callable[[int], bytes | None], why: str, topic: Topic) -> None:
        out.extend((topic, make(i), why) for i in range(count))

    def encoded_event(**overrides: Any) -> Callable[[int], bytes]:
        return lambda i: CODEC.encode("event", {**event_value(now, f"h-{i}"), **overrides})

    def encoded_tick(**overrides: Any) -> Callable[[int], bytes]:
        return lambda i: CODEC.encode("tick", tick_value(now + timedelta(seconds=i), **overrides))

    def deep_event(i: int) -> bytes:
        return encoded_event(payload=nested_object(65 + i % 900))(i)

    ev, tk = Topic.EVENTS, Topic.TICKS
    forged = b"\xc3\x01"
    many(200, lambda i: forged + os.urandom(8) + os.urandom(i % 7), "registered by no writer", ev)
    many(100, lambda i: b"\x00" + os.urandom(20), "not Avro single-object", ev)
    many(100, lambda i: event[: 10 + i % (len(event) - 10)], "undecodable", ev)
    many(50, lambda i: event + b"\x00" * (1 + i), "trailing bytes", ev)
    many(100, deep_event, "nested deeper", ev)
    many(3, encoded_event(payload='{"a":' + "[" * 200_000 + "]" * 200_000 + "}"), "deeper", ev)
    many(100, encoded_event(payload='{"n": ' + "9" * 20_000 + "}"), "digits", ev)
    many(50, encoded_event(payload='{"n": 9007199254740993}'), "larger than", ev)
    many(100, encoded_event(payload='{"n": NaN, "m": 1}'), "NaN is not JSON", ev)
    many(100, encoded_event(payload="[1, 2, 3]"), "not a JSON object", ev)
    many(3, encoded_event(payload='{"s": "' + "x" * 600_000 + '"}'), "larger than", ev)
    many(2, encoded_event(payload='{"s": "' + "x" * 980_000 + '"}'), "larger than", ev)
    many(100, encoded_event(event_id="e" * 1_000), "longer than 256 bytes", ev)
    many(50, encoded_event(observed_at=datetime(1, 1, 1, tzinfo=UTC)), "outside the years", ev)
    many(50, encoded_tick(), "which carries events", ev)
    many(20, lambda i: None, "no value", ev)
    # Pinned run states the ticker also reads: typed right, payload hostile.
    many(
        50,
        encoded_event(
            source_id=f"run:{RUN}",
            event_type="workflow.run.status",
            payload=nested_object(70),
        ),
        "nested deeper",
        ev,
    )
    many(30, lambda i: forged + os.urandom(8), "registered by no writer", tk)
    many(30, encoded_tick(scheduled_at=datetime(1, 1, 1, tzinfo=UTC)), "outside the years", tk)
    many(30, encoded_tick(usage_tokens=-5), "usage", tk)
    many(30, encoded_tick(payload='{"n": NaN}'), "NaN is not JSON", tk)
    many(30, encoded_tick(tool_error="melted"), "not valid evidence", tk)
    rng.shuffle(out)
    return out


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else value or ""


def dead_letters(deployment: Deployment) -> list[tuple[str, int, int, str]]:
    """(origin topic, partition, offset, reason) of every committed dead letter."""
    found = []
    for msg in read_all(deployment.bootstrap, deployment.name(Topic.DEAD_LETTER)):
        headers = {str(k): _text(v) for k, v in list(msg.headers() or [])}
        origin = headers[DLQ_TOPIC], int(headers[DLQ_PARTITION]), int(headers[DLQ_OFFSET])
        found.append((*origin, headers[DLQ_REASON]))
    return found


def committed_at_end(deployment: Deployment, group: str, topic: Topic) -> bool:
    """Whether ``group`` committed every partition of ``topic`` up to its end."""
    name = deployment.name(topic)
    consumer = Consumer(table_consumer_config(deployment.bootstrap, "offsets-probe"))
    try:
        parts = [TopicPartition(name, p) for p in range(PARTITIONS)]
        probe = Consumer({**table_consumer_config(deployment.bootstrap, "x"), "group.id": group})
        try:
            committed = {tp.partition: tp.offset for tp in probe.committed(parts, timeout=10)}
        finally:
            probe.close()
        for tp in parts:
            _, high = consumer.get_watermark_offsets(tp, timeout=10)
            if committed.get(tp.partition, -1) < high:
                return False
        return True
    finally:
        consumer.close()


@pytest.fixture
def deployment(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Deployment:
    return Deployment(kafka_bootstrap, unique_name("t-hostile") + ".")


@pytest.fixture
def pipeline(deployment: Deployment, redis_url: str) -> Iterator[tuple[Pipeline, ManualClock]]:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    clock = ManualClock(now)
    deployment.grant({SOURCE, f"run:{RUN}"}, {"workflow.run.status@v1"}, "ops.alert", {"ops-hook"})
    event_watch = WatcherDefinition.from_json(
        {
            "watcher_id": "build-failed",
            "purpose": "ops.alert",
            "source": {"kind": "event", "source_id": SOURCE, "event_type": TYPE, "max_age": "1h"},
            "condition": {"eq": ["status", "failed"]},
            "delivery": {"target": "ops-hook"},
            "expires_at": "2030-01-01T00:00:00Z",
        },
        tenant_id=TENANT,
        user_id=USER,
    ).with_version(1)
    deployment.watcher(event_watch, now - timedelta(hours=1))
    deployment.watcher(polling_definition("run-poll", RUN, "latest"), now - timedelta(minutes=1))
    running = Pipeline(deployment, clock, redis_url)
    yield running, clock
    running.close()


def test_hostile_records_are_dead_lettered_with_reasons_and_good_events_all_decided(
    deployment: Deployment, pipeline: tuple[Pipeline, ManualClock]
) -> None:
    running, clock = pipeline
    now = clock.now()
    hostile = hostile_records(now)
    assert len(hostile) >= 1_000
    good = [f"g-{i}" for i in range(GOOD_EVENTS)]
    producer = deployment.producer
    home = partition_for(SOURCE, PARTITIONS)
    expected: dict[tuple[str, int, int], str] = {}  # (topic, partition, offset) → reason part
    sent: Counter[tuple[str, int]] = Counter()  # fresh topics, one plain producer: offsets 0..
    order: list[tuple[str, Any]] = [("good", e) for e in good] + [("bad", h) for h in hostile]
    random.Random(7).shuffle(order)

    def offset_of(topic: str, partition: int) -> int:
        offset = sent[(topic, partition)]
        sent[(topic, partition)] += 1
        return offset

    for kind, item in order:
        if kind == "good":
            value = CODEC.encode("event", event_value(now, item))
            name, partition, key = deployment.name(Topic.EVENTS), home, SOURCE
        else:
            topic, value, why = item
            name = deployment.name(topic)
            key = SOURCE if topic is Topic.EVENTS else f"run:{RUN}"
            partition = home if len(expected) % 10 < 7 else (home + 1) % PARTITIONS
            expected[(name, partition, offset_of(name, partition))] = why
            producer.produce(name, value, key, partition)
            continue
        offset_of(name, partition)
        producer.produce(name, value, key, partition)
        producer.poll(0)
    assert producer.flush(60) == 0

    ticks_topic = deployment.name(Topic.TICKS)
    events_topic = deployment.name(Topic.EVENTS)
    group = running.evaluator.group_id

    def consumed(topic: str) -> float:
        labels = {"group": group, "topic": topic}
        found = running._registry.get_sample_value("vigil_runtime_records_consumed_total", labels)
        return found or 0.0

    total_events = sum(n for (t, _), n in sent.items() if t == events_topic)
    hostile_ticks = sum(1 for (t, _, _) in expected if t == ticks_topic)
    running.step(
        until=lambda: (
            consumed(events_topic) >= total_events and consumed(ticks_topic) >= hostile_ticks
        ),
        max_s=240,
    )
    clock.advance(timedelta(minutes=1))  # one more poll, after all of it: the ticker still ticks
    running.step(max_s=60)
    for _ in range(5):
        running.step(max_s=30)
    running.evaluator.transaction().commit()

    assert running.evaluator.paused == frozenset()
    assert running.ticker.app.paused == frozenset()
    letters = dead_letters(deployment)
    reasons = {(topic, partition, offset): reason for topic, partition, offset, reason in letters}
    assert len(reasons) == len(letters), "a record was dead-lettered twice"
    assert reasons.keys() == expected.keys()
    for origin, why in expected.items():
        assert why in reasons[origin], (origin, why, reasons[origin])

    decided: Counter[str] = Counter()
    ring = current_ring(deployment.bootstrap, deployment.topology)
    for msg in read_all(deployment.bootstrap, deployment.name(Topic.RECEIPTS)):
        receipt, _ = decode_receipt(CODEC, ring, msg.value() or b"")
        if receipt.watcher_id == "build-failed":
            decided[receipt.trigger["event_id"]] += 1
    assert set(good) <= set(decided), "a good event was not decided"
    assert running.run_status(RUN) is None  # the hostile run states were never taken as state
    assert committed_at_end(deployment, group, Topic.EVENTS)
    assert committed_at_end(deployment, group, Topic.TICKS)
