"""Throughput of the exactly-once runtime against a bare confluent-kafka passthrough.

``python -m benchmarks.runtime`` pre-loads N small records into a fresh input topic, then times
two consume → produce passthroughs over them on the same broker in the same run, each in its own
consumer group with the same transaction cadence (commit every 1000 records or 100 ms,
``send_offsets_to_transaction`` in every transaction, batches of 500):

- ``bare``: a hand-written loop on ``Consumer`` + transactional ``Producer``;
- ``runtime``: :class:`pipeline.runtime.app.StreamApp` with a processor that re-emits each
  record to the same partition.

Timing starts at the first record consumed (group join excluded) and ends when the last
transaction holding the N-th record has committed. Rounds alternate which variant goes first.
The headline is the ratio of medians (on a shared 2-core machine commit latency dominates and
single runs are noisy), with best-of and each variant's process CPU seconds (its own overhead,
free of broker noise). Prints one JSON object. Env: ``KAFKA_BOOTSTRAP_SERVERS`` (default
127.0.0.1:9092), ``BENCH_RECORDS`` (default 100000), ``BENCH_ROUNDS`` (default 4).
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from pipeline.kafka.clients import consumer_config, producer_config
from pipeline.runtime.app import InputRecord, ProcessContext, StreamApp

__all__ = ["main"]

PARTITIONS = 4
COMMIT_EVERY = 1000
COMMIT_INTERVAL_S = 0.1
BATCH = 500


def _topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(n, PARTITIONS, 1) for n in names], operation_timeout=30
    ).values():
        future.result()


def _load(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer(producer_config(bootstrap))
    for i in range(n):
        while True:
            try:
                producer.produce(topic, b"v%07d" % i, b"k%d" % (i % 1000), i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)


Fanout = Callable[[int, Message], Iterable[tuple[str, bytes, bytes, int]]]
"""What a passthrough writes for its i-th input: ``(topic, key, value, partition)`` records."""


def bare(
    bootstrap: str,
    source: str,
    sink: str,
    n: int,
    fanout: Fanout | None = None,
    charge: Callable[[list[Message]], object] | None = None,
) -> tuple[float, float]:
    """The hand-written passthrough: the baseline the runtime is held to. Each input is copied
    to ``sink``, or, with ``fanout``, replaced by the records it names (the same cadence);
    ``charge`` is called with each batch before its records are written."""
    run = uuid.uuid4().hex[:8]
    consumer = Consumer(consumer_config(bootstrap, f"bench-bare-{run}"))
    producer = Producer(producer_config(bootstrap, transactional_id=f"bench-bare-{run}"))
    producer.init_transactions(30)
    consumer.subscribe([source])
    done, since, started, in_txn, due, cpu = 0, 0, 0.0, False, 0.0, 0.0
    assignment: list[TopicPartition] | None = None
    metadata: Any = None
    while True:
        messages = consumer.consume(BATCH, 0.05)
        if messages:
            if not started:
                started, cpu = time.perf_counter(), time.process_time()
            if not in_txn:
                producer.begin_transaction()
                in_txn, due = True, time.monotonic() + COMMIT_INTERVAL_S
            if charge is not None:
                charge(messages)
            if fanout is None:
                for msg in messages:
                    producer.produce(sink, msg.value(), msg.key(), msg.partition() or 0)
            else:
                for i, msg in enumerate(messages, done):
                    for topic, key, value, partition in fanout(i, msg):
                        _produce(producer, topic, key, value, partition)
            since += len(messages)
            done += len(messages)
        if in_txn and (since >= COMMIT_EVERY or time.monotonic() >= due or done >= n):
            if assignment is None:  # fixed for the run: one member, no rebalance
                assignment, metadata = consumer.assignment(), consumer.consumer_group_metadata()
            positions = [tp for tp in consumer.position(assignment) if tp.offset >= 0]
            producer.send_offsets_to_transaction(positions, metadata)
            producer.commit_transaction()
            in_txn, since = False, 0
            if done >= n:
                elapsed = time.perf_counter() - started, time.process_time() - cpu
                consumer.close()
                return elapsed
        producer.poll(0)


def _produce(producer: Producer, topic: str, key: bytes, value: bytes, partition: int) -> None:
    while True:
        try:
            producer.produce(topic, value, key, partition)
            return
        except BufferError:  # more records per input than the queue holds: let it drain
            producer.poll(0.05)


def runtime(bootstrap: str, source: str, sink: str, n: int) -> tuple[float, float]:
    """The same passthrough on StreamApp."""
    run = uuid.uuid4().hex[:8]
    seen = [0, 0.0, 0.0]

    def process(batch: list[InputRecord], ctx: ProcessContext) -> None:
        if not seen[1]:
            seen[1], seen[2] = time.perf_counter(), time.process_time()
        produce, partition = ctx.produce, ctx.partition
        for record in batch:
            produce(sink, record.key, record.value, partition)
        seen[0] += len(batch)

    app = StreamApp(
        bootstrap,
        f"bench-rt-{run}",
        "one",
        [source],
        process,
        commit_every=COMMIT_EVERY,
        commit_interval_ms=int(COMMIT_INTERVAL_S * 1000),
        max_batch=BATCH,
    )
    with app:
        while seen[0] < n:
            app.step()
        app.transaction().commit()
        elapsed = time.perf_counter() - float(seen[1]), time.process_time() - float(seen[2])
    return elapsed


def main() -> None:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    n = int(os.environ.get("BENCH_RECORDS", "100000"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "4"))
    run = uuid.uuid4().hex[:8]
    source = f"bench-runtime-in-{run}"
    sinks = [f"bench-runtime-out-{run}-{i}" for i in range(2 * rounds)]
    _topics(bootstrap, source, *sinks)
    _load(bootstrap, source, n)
    wall: dict[str, list[float]] = {"bare": [], "runtime": []}
    cpu: dict[str, list[float]] = {"bare": [], "runtime": []}
    for i in range(rounds):
        order = [("bare", bare), ("runtime", runtime)]
        for j, (name, variant) in enumerate(order if i % 2 == 0 else order[::-1]):
            seconds, cpu_seconds = variant(bootstrap, source, sinks[2 * i + j], n)
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)
    bare_rps = n / statistics.median(wall["bare"])
    runtime_rps = n / statistics.median(wall["runtime"])
    print(
        json.dumps(
            {
                "benchmark": "runtime",
                "records": n,
                "rounds": rounds,
                "partitions": PARTITIONS,
                "commit_every": COMMIT_EVERY,
                "commit_interval_ms": int(COMMIT_INTERVAL_S * 1000),
                "bare_records_per_s": round(bare_rps),
                "runtime_records_per_s": round(runtime_rps),
                "ratio": round(runtime_rps / bare_rps, 3),
                "goal_ratio": 0.8,
                "best_ratio": round(min(wall["bare"]) / min(wall["runtime"]), 3),
                "bare_seconds": [round(t, 3) for t in wall["bare"]],
                "runtime_seconds": [round(t, 3) for t in wall["runtime"]],
                "bare_cpu_seconds": round(statistics.median(cpu["bare"]), 3),
                "runtime_cpu_seconds": round(statistics.median(cpu["runtime"]), 3),
                "cpu_ratio": round(
                    statistics.median(cpu["bare"]) / statistics.median(cpu["runtime"]), 3
                ),
            }
        )
    )
    AdminClient({"bootstrap.servers": bootstrap}).delete_topics([source, *sinks])


if __name__ == "__main__":
    main()
