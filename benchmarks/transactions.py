"""Back-to-back transactions: how long the commit path waits with librdkafka's default retry
backoff and with vigil's.

``python -m benchmarks.transactions`` creates an input and an output topic (4 partitions, a
unique prefix, deleted after), fills the input, then runs a transactional consume → produce
loop the way a busy member does: each transaction begins right after the previous commit,
produces its batch (one record per input to the same partition), sends the consumed offsets
and commits. It runs twice, alternating, with the producer settings of
:func:`pipeline.kafka.clients.producer_config` (``retry.backoff.ms`` 10) and with librdkafka's
default (100), each in its own consumer group and transactional id.

Why: a transaction begun right after a commit, or offsets sent right after a partition was
registered, meets CONCURRENT_TRANSACTIONS from the coordinator (the previous markers, the
registration still being written) and is retried after ``retry.backoff.ms``. Prints one JSON
object: per setting, p50/p95/max of the commit path (send offsets + commit, milliseconds) and
how many transactions took longer than 50 ms. Env: ``KAFKA_BOOTSTRAP_SERVERS`` (default
127.0.0.1:9092), ``BENCH_TRANSACTIONS`` (default 200 per setting).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from pipeline.kafka.clients import consumer_config, producer_config

__all__ = ["main"]

PARTITIONS = 4
BATCH = 20  # records per transaction: a delivery turn's or a quiet evaluator's


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def _loop(
    bootstrap: str, source: str, sink: str, name: str, count: int, overrides: dict[str, Any]
) -> list[float]:
    """``count`` back-to-back transactions; the commit path of each, in milliseconds."""
    producer = Producer(producer_config(bootstrap, transactional_id=name, **overrides))
    producer.init_transactions(30)
    consumer = Consumer(consumer_config(bootstrap, name))
    consumer.subscribe([source])
    took: list[float] = []
    try:
        while len(took) < count:
            batch = [m for m in consumer.consume(BATCH, 1.0) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for msg in batch:
                partition = msg.partition()
                assert partition is not None  # a consumed record has its partition
                producer.produce(sink, msg.value(), msg.key(), partition)
            started = time.perf_counter()
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            took.append((time.perf_counter() - started) * 1000)
    finally:
        consumer.close()
    return took


def _summary(took: list[float]) -> dict[str, Any]:
    return {
        "transactions": len(took),
        "commit_path_p50_ms": _percentile(took, 0.5),
        "commit_path_p95_ms": _percentile(took, 0.95),
        "commit_path_max_ms": round(max(took), 1),
        "over_50_ms": sum(1 for t in took if t > 50),
    }


def main() -> int:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    count = int(os.environ.get("BENCH_TRANSACTIONS", "200"))
    prefix = f"bench-txn-{uuid.uuid4().hex[:8]}"
    source, sink = f"{prefix}.in", f"{prefix}.out"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(t, PARTITIONS, 1) for t in (source, sink)]
    ).values():
        future.result()
    settings: dict[str, dict[str, Any]] = {
        "vigil": {},
        "librdkafka_default": {"retry.backoff.ms": 100},
    }
    took: dict[str, list[float]] = {name: [] for name in settings}
    try:
        loader = Producer(producer_config(bootstrap))
        for i in range(count * BATCH * len(settings)):
            loader.produce(source, b"v%07d" % i, b"k%d" % i, i % PARTITIONS)
            loader.poll(0)
        loader.flush(60)
        for half in range(2):  # alternate, so both meet the same broker and machine load
            for name, overrides in settings.items():
                took[name] += _loop(
                    bootstrap, source, sink, f"{prefix}.{name}.{half}", count // 2, overrides
                )
    finally:
        admin.delete_topics([source, sink])
    report: dict[str, Any] = {"benchmark": "transactions", "records_per_transaction": BATCH}
    report.update({name: _summary(values) for name, values in took.items()})
    report["p50_ratio"] = round(
        report["librdkafka_default"]["commit_path_p50_ms"] / report["vigil"]["commit_path_p50_ms"],
        2,
    )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
