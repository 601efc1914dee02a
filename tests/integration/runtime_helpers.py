"""Small real-broker helpers shared by the runtime tests: topics, inputs, committed reads."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from pipeline.kafka.clients import producer_config, table_consumer_config
from pipeline.kafka.partitioner import partition_for

__all__ = ["create_topics", "header_pairs", "produce_inputs", "read_all", "read_table"]


def create_topics(bootstrap: str, partitions: int, *names: str, compact: bool = False) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact"} if compact else {}
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=config) for name in names], operation_timeout=30
    )
    for future in futures.values():
        future.result()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=10).topics
        if all(name in topics and len(topics[name].partitions) == partitions for name in names):
            return
        time.sleep(0.1)
    raise AssertionError(f"topics {names} did not appear")


def produce_inputs(
    bootstrap: str, topic: str, partitions: int, records: Iterable[tuple[str, bytes]]
) -> int:
    """Produce (key, value) pairs at Java's partition for each key; returns how many."""
    producer = Producer(producer_config(bootstrap))
    n = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key, partition_for(key, partitions))
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
    assert producer.flush(30) == 0
    return n


def read_all(
    bootstrap: str, topic: str, max_s: float = 60.0, *, committed: bool = True
) -> list[Message]:
    """Every committed record of ``topic`` (every record, aborted ones too, with
    ``committed=False``), read until every partition is at its end."""
    isolation = "read_committed" if committed else "read_uncommitted"
    consumer = Consumer(
        table_consumer_config(
            bootstrap, f"reader-{uuid.uuid4().hex[:6]}", **{"isolation.level": isolation}
        )
    )
    metadata = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, -2) for p in metadata.partitions])
    out: list[Message] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + max_s
    try:
        while len(at_end) < len(metadata.partitions) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                error = msg.error()
                if error is not None:
                    at_end.add(msg.partition() or 0)
                    continue
                at_end.discard(msg.partition() or 0)
                out.append(msg)
    finally:
        consumer.close()
    return out


def header_pairs(msg: Message) -> list[tuple[str, str | bytes | None]]:
    """A consumed record's headers as (name, value) pairs: the client types them as a list or a
    dict (its type serves producing too); a consumed record's are a list, or None when absent."""
    raw = msg.headers() or []
    return list(raw.items()) if isinstance(raw, dict) else raw


def read_table(bootstrap: str, topic: str) -> dict[str, bytes]:
    """The last committed value per key of a changelog (tombstones remove the key)."""
    table: dict[str, bytes] = {}
    for msg in read_all(bootstrap, topic):
        key = (msg.key() or b"").decode()
        value = msg.value()
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table
