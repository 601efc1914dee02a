"""A passthrough that writes what the evaluator writes: ``benchmarks.evaluator``'s fair baseline.

The raw passthrough copies one small record per input; the evaluator writes, per matching input,
a receipt, a watcher-state changelog entry and (when satisfied) an outbox entry, all sealed and
Avro-encoded, so part of its cost is the broker's write cost, not its own. :func:`census` reads
back what an evaluator run committed to its output topics (count, and up to ``SAMPLES`` real
records per topic); :func:`fanout` turns that into a per-input plan: input *i* of *n* writes
``floor((i+1)·c/n) − floor(i·c/n)`` records of a topic that received *c*, cycling through the
real records' keys and values, so count, size and compressibility (lz4) match. It runs on
:func:`benchmarks.runtime.bare`'s loop, with its transaction cadence.

Leaves out the evaluator itself and what the records mean: only their bytes are copied.
:func:`charges` adds what stays in Python whatever is compiled (issue 29: Redis budgets): one
budget charge per input, a batch's in one round trip, as the evaluator's plan sends them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from benchmarks.runtime import Fanout
from pipeline.kafka.clients import consumer_config
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import BudgetCaps, BudgetScope, Charge, Dimension, offset_token

__all__ = ["SAMPLES", "Output", "census", "charges", "fanout"]

SAMPLES = 2000


@dataclass(slots=True)
class Output:
    """What one topic received: its record count, bytes and sampled ``(key, value)`` pairs."""

    count: int = 0
    key_bytes: int = 0
    value_bytes: int = 0
    samples: list[tuple[bytes, bytes]] = field(default_factory=list)

    @property
    def mean_size(self) -> float:
        return (self.key_bytes + self.value_bytes) / max(self.count, 1)


def census(bootstrap: str, topics: Iterable[str], partitions: int) -> dict[str, Output]:
    """Every committed record of ``topics`` (read to their end): counts, sizes, samples."""
    config = consumer_config(
        bootstrap, f"bench-census-{uuid.uuid4().hex[:8]}", **{"enable.partition.eof": True}
    )
    consumer = Consumer(config)
    names = list(topics)
    consumer.assign([TopicPartition(t, p, -2) for t in names for p in range(partitions)])
    found = {t: Output() for t in names}
    pending = {(t, p) for t in names for p in range(partitions)}
    try:
        while pending:
            for msg in consumer.consume(1000, 1.0):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard((msg.topic() or "", msg.partition() or 0))
                    continue
                _count(found[msg.topic() or ""], msg)
    finally:
        consumer.close()
    return found


def _count(output: Output, msg: Message) -> None:
    key, value = msg.key() or b"", msg.value() or b""
    output.count += 1
    output.key_bytes += len(key)
    output.value_bytes += len(value)
    if len(output.samples) < SAMPLES:
        output.samples.append((key, value))


def fanout(outputs: dict[str, Output], inputs: int, sinks: dict[str, str]) -> Fanout:
    """Per input, records of every output topic in the evaluator's proportion, written to that
    topic's sink (``sinks``: output topic → sink topic) on the input's partition."""
    plan = [(sinks[t], o.count, o.samples) for t, o in outputs.items() if o.count and o.samples]

    def records(i: int, msg: Message) -> Iterable[tuple[str, bytes, bytes, int]]:
        partition = msg.partition() or 0
        for sink, count, samples in plan:
            for j in range(i * count // inputs, (i + 1) * count // inputs):
                key, value = samples[j % len(samples)]
                yield sink, key, value, partition

    return records


def charges(
    budgets: RedisBudgets,
    caps: BudgetCaps,
    watcher_of: Callable[[Message], tuple[BudgetScope, str]],
) -> Callable[[list[Message]], object]:
    """Per batch, one charge per input (``watcher_of``: the scope and key of the watcher it
    matched, kept as the evaluator's index keeps them), all in one ``verdicts_many``, with the
    evaluator's increment and token (``consumers.evaluator.plan``)."""

    def charge(messages: list[Message]) -> object:
        batch = []
        for msg in messages:
            scope, key = watcher_of(msg)
            position = offset_token(msg.topic() or "", msg.partition() or 0, msg.offset() or 0)
            increment = {Dimension.EVALUATIONS: 1, Dimension.TOKENS: 0, Dimension.MICRO_USD: 0}
            batch.append(Charge._make((scope, caps, increment, f"{position}:{key}")))
        return budgets.verdicts_many(batch, datetime.now(UTC))

    return charge
