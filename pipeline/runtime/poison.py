"""Records the processor must not see: undecodable ones and ones from a newer writer.

Undecodable bytes (``SerdeError``) go to the dead-letter topic with their original key and value
and the headers ``vigil.dlq.reason/topic/partition/offset``, inside the open transaction, and
the partition moves on: a poison record never stalls it (DESIGN.md §2). An unknown schema
fingerprint (``UnknownSchemaError``) is a newer writer, not poison: its partition is paused at
that record, counted and logged for an alert, and never dead-lettered (DESIGN.md §10).
Leaves out decoding itself (``pipeline.kafka.serde``) and transactions (``checkpoint``).
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from pipeline.rules.errors import SerdeError, UnknownSchemaError
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.runtime.processing import Placement, dead_letter_headers

__all__ = ["Quarantine"]

log = logging.getLogger(__name__)


class Quarantine:
    """Dead-letters poison records and keeps the partitions paused on unknown schemas."""

    def __init__(self, group_id: str, dead_letter_topic: str, metrics: RuntimeMetrics) -> None:
        self.group_id = group_id
        self.topic = dead_letter_topic
        self.metrics = metrics
        self.paused: dict[tuple[str, int], int] = {}  # → offset of the unreadable record

    def dead_letter(
        self, producer: Producer, placement: Placement, msg: Message, exc: SerdeError
    ) -> None:
        key = msg.key()
        producer.produce(
            self.topic,
            msg.value(),
            key,
            placement.partition_of(self.topic, key),
            headers=dead_letter_headers(msg, exc),
        )
        self.metrics.dead_letters.labels(self.group_id, msg.topic() or "").inc()
        log.warning("dead-lettered %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), exc)

    def pause(self, consumer: Consumer, msg: Message, exc: UnknownSchemaError) -> None:
        """Stop the partition at the record, so a newer build reads it again: never skip it."""
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        tp = TopicPartition(topic, partition, offset)
        consumer.pause([tp])
        consumer.seek(tp)
        self.paused[(topic, partition)] = offset
        self.metrics.unknown_schema.labels(self.group_id, topic).inc()
        self._gauge()
        log.error("paused %s[%s] at offset %s: %s", topic, partition, offset, exc)

    def positions(self, positions: list[TopicPartition]) -> list[TopicPartition]:
        """Offsets to commit: a paused partition's stay at its unreadable record."""
        kept = [
            tp for tp in positions if tp.offset >= 0 and (tp.topic, tp.partition) not in self.paused
        ]
        kept.extend(TopicPartition(t, p, o) for (t, p), o in self.paused.items())
        return kept

    def forget(self, partitions: list[TopicPartition]) -> None:
        """A new assignment resumes every partition: its pause ends with it."""
        for tp in partitions:
            self.paused.pop((tp.topic, tp.partition), None)
        self._gauge()

    def _gauge(self) -> None:
        self.metrics.paused_partitions.labels(self.group_id).set(len(self.paused))
