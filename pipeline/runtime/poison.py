"""Records the processor must not see: undecodable ones, garbage, ones from a newer writer, and
ones whose processing failed (DESIGN.md §10 "Hostile input", "Schema upgrades").

Owns :class:`Quarantine`: poison goes to the dead-letter topic (key, value or a prefix of it,
``vigil.dlq.*`` headers) in the transaction and the partition moves on; a newer writer's record
pauses its partition, counted for an alert, never dead-lettered. Leaves out decoding, the
schema catalog (``pipeline.kafka``) and transactions.
"""

from __future__ import annotations

import enum
import logging

from confluent_kafka import Consumer, Producer, TopicPartition

from pipeline.kafka.topics import dead_letter_headers
from pipeline.rules.errors import UnknownSchemaError
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.runtime.processing import Headers, Message, Placement

__all__ = ["DLQ_ORIGINAL_BYTES", "Cause", "Quarantine"]

log = logging.getLogger(__name__)

_MAX_COPIED = 900_000  # bytes of key and value a dead letter copies whole (the limit is 1 MB)
_KEPT_PREFIX = 64 * 1024  # what it keeps of a larger one
DLQ_ORIGINAL_BYTES = "vigil.dlq.original-bytes"


class Cause(enum.Enum):
    """Why a record was dead-lettered (the metric's ``cause`` label)."""

    UNDECODABLE = "undecodable"
    UNREGISTERED_SCHEMA = "unregistered_schema"
    PROCESSING_FAILED = "processing_failed"


class Quarantine:
    """Dead-letters poison records and keeps the partitions paused on newer schemas."""

    def __init__(self, group_id: str, dead_letter_topic: str, metrics: RuntimeMetrics) -> None:
        self.group_id = group_id
        self.topic = dead_letter_topic
        self.metrics = metrics
        self.paused: dict[tuple[str, int], int] = {}  # → offset of the unreadable record

    def dead_letter(
        self, producer: Producer, placement: Placement, msg: Message, reason: str, cause: Cause
    ) -> None:
        """Write ``msg`` to the dead-letter topic with ``reason`` (in the open transaction)."""
        key, value = msg.key(), msg.value()
        partition, offset = msg.partition(), msg.offset()  # None only for a client's own event
        origin = (-1 if partition is None else partition, -1 if offset is None else offset)
        headers: Headers = [*dead_letter_headers(reason, msg.topic() or "", *origin)]
        if len(key or b"") + len(value or b"") > _MAX_COPIED:
            # Near the broker's record limit a copy plus headers would be refused (and a refusal
            # here would stop the process): keep a prefix and say how long the original was.
            headers.append((DLQ_ORIGINAL_BYTES, str(len(value or b"")).encode()))
            key, value = (key or b"")[:_KEPT_PREFIX], (value or b"")[:_KEPT_PREFIX]
        producer.produce(
            self.topic, value, key, placement.partition_of(self.topic, key), headers=headers
        )
        self.metrics.dead_letters.labels(self.group_id, msg.topic() or "", cause.value).inc()
        log.warning(
            "dead-lettered %s[%s]@%s (%s): %s",
            msg.topic(),
            msg.partition(),
            msg.offset(),
            cause.value,
            reason,
        )

    def pause(self, consumer: Consumer, msg: Message, exc: UnknownSchemaError) -> None:
        """Stop the partition at the record, so a newer build reads it again: never skip it."""
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        tp = TopicPartition(topic, partition, offset)
        consumer.pause([tp])
        consumer.seek(tp)
        self.paused[(topic, partition)] = offset
        self.metrics.unknown_schema.labels(self.group_id, topic).inc()
        self._gauge()
        log.error(
            "paused %s[%s] at offset %s: %s, registered by a newer writer: upgrade this process",
            topic,
            partition,
            offset,
            exc,
        )

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
