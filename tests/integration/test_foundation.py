"""Proves the servers under the suite are real: Kafka transactions across a rebalance, and Redis
Lua. Exercises only the clients (confluent-kafka, redis-py), none of vigil's own plumbing."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

pytestmark = pytest.mark.integration

RECORDS = 1000
PARTITIONS = 4
GATE = 200  # the first member processes this many before the second joins
DEADLINE_S = 120.0


@dataclass
class Member:
    """One consumer/producer pair of the group, with what it saw, for the assertions."""

    name: str
    processed: int = 0
    processed_after_join: int = 0
    revoked: int = 0
    assignment: list[int] = field(default_factory=list)
    assigned: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


def _create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names])
    for future in futures.values():
        future.result(timeout=30)


def _int(value: int | None) -> int:
    """A consumed record always has a partition and an offset; say so to the type checker."""
    assert value is not None
    return value


def _relay(
    bootstrap: str,
    member: Member,
    group: str,
    topics: tuple[str, str],
    stop: threading.Event,
    may_continue: Callable[[Member], bool],
    joined: threading.Event,
) -> None:
    """Consume ``topics[0]`` and produce each record to ``topics[1]`` in one transaction per
    batch, committing the consumed offsets in the same transaction."""
    source, sink = topics
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "classic",
            "partition.assignment.strategy": "range",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 6000,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"{group}-{member.name}",
            "transaction.timeout.ms": 30000,
        }
    )

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        member.assignment = sorted(p.partition for p in partitions)
        if partitions:
            member.assigned.set()

    def on_revoke(c: Consumer, partitions: list[TopicPartition]) -> None:
        member.revoked += 1

    try:
        producer.init_transactions(30)
        consumer.subscribe([source], on_assign=on_assign, on_revoke=on_revoke)
        while not stop.is_set():
            if not may_continue(member):
                # Keep polling (so the group can rebalance) without taking new records.
                consumer.pause(consumer.assignment())
                held = consumer.poll(0.1)
                if held is not None and not held.error():
                    # Fetched before the pause: leave it for whoever owns the partition next.
                    consumer.seek(
                        TopicPartition(source, _int(held.partition()), _int(held.offset()))
                    )
                continue
            consumer.resume(consumer.assignment())
            batch = [m for m in consumer.consume(num_messages=25, timeout=0.2) if not m.error()]
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                producer.produce(
                    sink,
                    key=message.key(),
                    value=message.value(),
                    partition=_int(message.partition()),
                )
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata()
            )
            producer.commit_transaction(30)
            member.processed += len(batch)
            if joined.is_set():
                member.processed_after_join += len(batch)
    except BaseException as exc:  # surfaced by the test thread
        member.error = exc
    finally:
        consumer.close()


def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    """Every committed value of ``topic``, read with read_committed up to the end offsets."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    try:
        ends = {
            tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # Every write here is transactional, so each partition ends with a commit marker
            # (which takes an offset): done once the position reaches it.
            positions = consumer.position(partitions)
            if all(
                ends[tp.partition] == 0 or tp.offset >= ends[tp.partition] - 1 for tp in positions
            ):
                return values
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                value = message.value()
                assert value is not None
                values.append(value)
        raise AssertionError(f"output not read to its end offsets {ends} in time")
    finally:
        consumer.close()


def test_transactional_relay_while_second_member_joins_loses_and_doubles_nothing(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    source, sink, group = unique_name("in"), unique_name("out"), unique_name("relay")
    _create_topics(kafka_bootstrap, source, sink)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    for i in range(RECORDS):
        producer.produce(source, key=f"k{i}".encode(), value=str(i).encode())
    assert producer.flush(30) == 0

    first, second = Member("a"), Member("b")
    stop, joined = threading.Event(), threading.Event()

    def first_may_continue(member: Member) -> bool:
        return member.processed < GATE or joined.is_set()

    def second_may_continue(member: Member) -> bool:
        return True

    topics = (source, sink)
    args = (kafka_bootstrap,)
    a = threading.Thread(
        target=_relay, args=(*args, first, group, topics, stop, first_may_continue, joined)
    )
    b = threading.Thread(
        target=_relay, args=(*args, second, group, topics, stop, second_may_continue, joined)
    )
    a.start()
    deadline = time.monotonic() + DEADLINE_S
    try:
        while first.processed < GATE and first.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.error is None and first.processed >= GATE
        b.start()
        # The second member is in once both hold partitions after the rebalance.
        while time.monotonic() < deadline and not (
            second.assigned.is_set() and first.revoked >= 1 and len(first.assignment) == 2
        ):
            assert first.error is None and second.error is None
            time.sleep(0.05)
        joined.set()
        while (
            first.processed + second.processed < RECORDS
            and first.error is None
            and second.error is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
    finally:
        stop.set()
        a.join(60)
        if b.ident is not None:
            b.join(60)

    assert first.error is None, first.error
    assert second.error is None, second.error
    assert first.processed < RECORDS, "the first member did all the work alone"
    assert second.processed > 0 and second.processed_after_join > 0
    assert len(second.assignment) == 2 and len(first.assignment) == 2
    assert set(first.assignment).isdisjoint(second.assignment)

    values = _read_committed(kafka_bootstrap, sink)
    counts = Counter(int(v) for v in values)
    assert sorted(counts) == list(range(RECORDS)), "records lost"
    assert max(counts.values()) == 1, "records doubled"


LUA_TAKE = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local cost, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
if used + cost > cap then return {0, used} end
used = redis.call('INCRBY', KEYS[1], cost)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, used}
"""


def test_lua_check_and_increment_allows_up_to_cap_then_refuses(
    redis_url: str, unique_name: Callable[[str], str]
) -> None:
    client = redis.Redis.from_url(redis_url)
    key = unique_name("budget")
    try:
        results = [client.eval(LUA_TAKE, 1, key, 1, 3, 60000) for _ in range(4)]
        assert results == [[1, 1], [1, 2], [1, 3], [0, 3]]
        assert client.get(key) == b"3"
        assert 0 < client.pttl(key) <= 60000
        assert client.eval(LUA_TAKE, 1, key, 5, 3, 60000) == [0, 3]
    finally:
        client.delete(key)
        client.close()
