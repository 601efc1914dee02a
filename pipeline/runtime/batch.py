"""One batch of input through a stream app: gather, decode, run the processor, settle.

Owns :func:`gather`, :func:`first_arrivals` and :class:`Batches`: tables caught up, each record
decoded (a failure dead-letters it; a newer writer's schema pauses its partition), the processor
run ``slice_records`` at a time, a batch cut at the transaction's budget, a failed one replayed
record by record (``isolation``). Only ``InfrastructureError`` propagates; committing is not here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from pipeline.kafka.clients import BrokerFailure, ErrorKind, translate
from pipeline.kafka.schema_catalog import SchemaCatalog
from pipeline.rules.errors import InfrastructureError, UnknownSchemaError
from pipeline.runtime.checkpoint import Checkpoint
from pipeline.runtime.isolation import Isolation, failure_reason
from pipeline.runtime.member import Member
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.runtime.poison import Cause, Quarantine
from pipeline.runtime.processing import Decoder, InputRecord, ProcessContext, Processor
from pipeline.runtime.state import TaskState
from pipeline.runtime.transactions import TransactionScope

__all__ = ["SCHEMAS_TABLE", "BatchOptions", "Batches", "first_arrivals", "gather"]

log = logging.getLogger(__name__)

SCHEMAS_TABLE = "vigil.schemas"
"""The global table of the ``schemas`` topic (a name no stage's own table takes)."""
_SLICE_S = 0.005  # slices of a window while waiting for the first records
_DEAD: Any = object()
Poll = Callable[[Consumer, Checkpoint, int, float], list[Message]]


def gather(consumer: Consumer, checkpoint: Checkpoint, limit: int, timeout: float) -> list[Message]:
    """One batch, always from one ``consume`` call: a record handed out by one call and kept
    through the next could outlive a rebalance served inside that call, whose revocation
    commits offsets past it (an input lost; the chaos test found it).

    None open and not due yet: the whole window (``timeout``), as a batch. Otherwise as
    :func:`first_arrivals`."""
    if not checkpoint.open and checkpoint.due_at() > time.monotonic():
        return consumer.consume(limit, timeout)
    return first_arrivals(consumer, checkpoint, limit, timeout)


def first_arrivals(
    consumer: Consumer, checkpoint: Checkpoint, limit: int, timeout: float
) -> list[Message]:
    """An open transaction: records until the window closes or it falls due. None open: the
    first records that arrive, read in short slices of the window (a caller that commits every
    turn gains nothing by waiting for more)."""
    start = time.monotonic()
    if checkpoint.open:
        return consumer.consume(limit, max(0.0, min(start + timeout, checkpoint.due_at()) - start))
    deadline = start + timeout
    while True:
        left = deadline - time.monotonic()
        batch = consumer.consume(limit, max(0.0, min(_SLICE_S, left)))
        if batch or left <= _SLICE_S:
            return batch


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """``limit`` records per batch, ``slice_records`` per processor call; ``judged``: the
    inputs whose undecodable records are dead-lettered (None: all); ``knows_schemas``: a
    ``schemas`` table tells a newer writer from garbage."""

    limit: int
    slice_records: int
    judged: frozenset[str] | None
    knows_schemas: bool


class Batches:
    """Decodes and processes the batches of one member, inside its open transaction."""

    def __init__(
        self,
        member: Member,
        scope: TransactionScope,
        state: TaskState,
        quarantine: Quarantine,
        metrics: RuntimeMetrics,
        processor: Processor,
        decode: Decoder | None,
        options: BatchOptions,
    ) -> None:
        self.processor = processor
        self.isolation = Isolation()
        self.placement = scope.placement
        self._limit = options.limit
        self._member = member
        self._scope = scope
        self._state = state
        self._quarantine = quarantine
        self._decode = decode
        self._slice = options.slice_records
        self._judged = options.judged
        self._knows_schemas = options.knows_schemas
        self._metrics = metrics
        self._inputs = member.inputs

    def take(self, poll: Poll, timeout: float) -> int:
        """Poll → decode → process one batch (``poll``: :func:`gather` or
        :func:`first_arrivals`); while a failed batch is replayed, one record, committed on its
        own (:meth:`one_at_a_time`)."""
        if self.isolation.active:
            return self.one_at_a_time(timeout)
        try:
            batch = poll(self._member.consumer, self._scope.checkpoint, self._limit, timeout)
        except KafkaException as exc:
            raise translate(exc, "consume") from exc
        return self.process(batch)[0] if batch else 0

    def one_at_a_time(self, timeout: float) -> int:
        """While a failed batch is replayed (``isolation``): one record, committed on its own,
        so the transaction of the record to blame holds nothing else."""
        scope = self._scope
        if scope.checkpoint.open:
            scope.commit()
        try:
            messages = self._member.consumer.consume(1, timeout)
        except KafkaException as exc:
            raise translate(exc, "consume") from exc
        done, settled = self.process(messages, isolating=True) if messages else (0, False)
        if scope.commit() and settled:
            for msg in messages:
                if msg.error() is None:
                    self.isolation.passed(
                        msg.topic() or "", msg.partition() or 0, msg.offset() or 0
                    )
        return done

    def process(self, messages: list[Message], isolating: bool = False) -> tuple[int, bool]:
        """Catch the tables up, decode, group by task partition, run the processor. Returns
        the number of input records settled (not put back for the next step) and whether they
        were settled (not rolled back)."""
        try:
            self._scope.begin()
        except BrokerFailure as exc:
            if exc.kind is not ErrorKind.FATAL:
                raise
            return 0, False  # the producer was rebuilt and the inputs rewound: read again
        self._state.catch_up()  # before decoding: a decoder sees the tables of this batch
        groups, rejected, consumed = self._decoded(messages)
        total = sum(consumed.values())
        rest = self._run(groups, isolating) if groups else []
        if rest is None:
            return total, False  # rolled back: rewound, or the record to blame dead-lettered
        cut = self._cut(rest)
        try:
            for msg, reason, cause in rejected:
                if _put_back(msg, cut):
                    rest.append(InputRecord(msg, _DEAD))
                else:
                    self._reject(msg, reason, cause)
        except KafkaException as exc:
            self._scope.recover(exc, "dead letter")
            return total, False
        for record in rest:  # counted when they are read again
            consumed[record.topic] -= 1
        total -= len(rest)
        for topic, count in consumed.items():
            self._metrics.consumed.labels(self._member.group_id, topic).inc(count)
        self._scope.checkpoint.records += total
        return total, True

    def _decoded(
        self, messages: list[Message]
    ) -> tuple[dict[int, list[InputRecord]], list[tuple[Message, str, Cause]], dict[str, int]]:
        """Records by task partition, the ones to dead-letter (unless put back), and how many
        were read per input topic."""
        groups: dict[int, list[InputRecord]] = {}
        rejected: list[tuple[Message, str, Cause]] = []
        consumed: dict[str, int] = {}
        per_topic = len(self._inputs) > 1
        decode, paused, total = self._decode, self._quarantine.paused, 0
        for msg in messages:
            if msg.error() is not None:
                _consume_error(msg)
                continue
            partition = msg.partition() or 0
            if paused and (msg.topic(), partition) in paused:
                continue
            value: Any = msg.value() if decode is None else self._value(msg, decode, rejected)
            if value is _PAUSED:
                continue
            total += 1
            if per_topic:
                topic = msg.topic() or ""
                consumed[topic] = consumed.get(topic, 0) + 1
            if value is _DEAD:
                continue
            group = groups.get(partition)
            if group is None:
                groups[partition] = [InputRecord(msg, value)]
            else:
                group.append(InputRecord(msg, value))
        if not per_topic:
            consumed[self._inputs[0]] = total
        return groups, rejected, consumed

    def _value(
        self, msg: Message, decode: Decoder, rejected: list[tuple[Message, str, Cause]]
    ) -> Any:
        """The decoded value, or _DEAD (to dead-letter) or _PAUSED (a newer writer's)."""
        try:
            return decode(msg)
        except UnknownSchemaError as exc:
            if self._newer_writer(exc):
                self._quarantine.pause(self._member.consumer, msg, exc)
                return _PAUSED
            reason = f"{exc}: registered by no writer (garbage)"
            rejected.append((msg, reason, Cause.UNREGISTERED_SCHEMA))
        except Exception as exc:  # whatever a decoder raises, the record is to blame
            rejected.append((msg, str(exc) or type(exc).__name__, Cause.UNDECODABLE))
        return _DEAD

    def _run(
        self, groups: dict[int, list[InputRecord]], isolating: bool
    ) -> list[InputRecord] | None:
        """Run the processor on each task partition's records, ``slice_records`` at a time.
        Returns the records put back (not run), or None if it rolled back.

        Once the transaction is :meth:`~pipeline.runtime.checkpoint.Checkpoint.overdue`, the
        slices not run yet are put back — each input sought to its first record not run, read
        again by the next step — so the transaction commits before its timeout aborts it (and
        fences the producer) and no batch, however slow its records, is redone forever."""
        producer = self._member.producer
        table, partition_of = self._state.table, self.placement.partition_of
        size, checkpoint = self._slice, self._scope.checkpoint
        slices = [
            (partition, records[start : start + size])
            for partition, records in groups.items()
            for start in range(0, len(records), size)
        ]
        cut_at = len(slices)
        try:
            for n, (partition, records) in enumerate(slices):
                if n and checkpoint.overdue():
                    cut_at = n
                    break
                ctx = ProcessContext(
                    partition, producer.produce, producer.poll, table, partition_of
                )
                self.processor(records, ctx)
        except KafkaException as exc:  # from produce: the producer failed, not the processor
            self._scope.recover(exc, "produce")
            return None
        except InfrastructureError:  # not the record's: abort, rewind, propagate
            log.exception("processor failed: aborting the transaction")
            self._scope.abort()
            self._scope.rewind()
            raise
        except Exception as exc:
            self._failed(groups, exc, isolating)
            return None
        return [record for _, rest in slices[cut_at:] for record in rest]

    def _cut(self, rest: list[InputRecord]) -> dict[tuple[str, int], int]:
        """Seek each input back to its first record of ``rest``; where each was cut."""
        cut: dict[tuple[str, int], int] = {}
        for record in rest:
            where = (record.topic, record.partition)
            cut[where] = min(record.offset, cut.get(where, record.offset))
        if not cut:
            return cut
        consumer = self._member.consumer
        for (topic, partition), offset in cut.items():
            try:
                consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:
                raise self._scope.uncertain(exc, f"seek {topic}[{partition}]") from exc
        self._metrics.batches_cut.labels(self._member.group_id).inc()
        log.info(
            "%s: batch cut after %.1fs to commit within the transaction timeout; "
            "%d records put back",
            self._member.group_id,
            self._scope.checkpoint.budget_s,
            len(rest),
        )
        return cut

    def _failed(
        self, groups: dict[int, list[InputRecord]], exc: Exception, isolating: bool
    ) -> None:
        """Dead-letter the record to blame when it ran alone; else replay the batch one record
        per transaction to find it."""
        records = [record for batch in groups.values() for record in batch]
        scope = self._scope
        if isolating and len(records) == 1:
            (record,) = records
            scope.abort()  # the transaction held this record alone: nothing else is undone
            scope.begin()
            self._quarantine.dead_letter(
                self._member.producer,
                self.placement,
                record.message,
                failure_reason(exc),
                Cause.PROCESSING_FAILED,
            )
            log.error("processing %r failed", record, exc_info=exc)
            if scope.commit():
                self.isolation.passed(record.topic, record.partition, record.offset)
            return
        log.error(
            "processor failed on a batch of %d records: replaying them one at a time",
            len(records),
            exc_info=exc,
        )
        last: dict[tuple[str, int], int] = {}
        for record in records:
            where = (record.topic, record.partition)
            last[where] = max(record.offset, last.get(where, -1))
        scope.abort()
        scope.rewind()
        self.isolation.enter(last)

    def _newer_writer(self, exc: UnknownSchemaError) -> bool:
        """Whether an unknown fingerprint is registered (a newer writer) rather than garbage;
        without a ``schemas`` topic it is always taken for a newer writer (pause, never lose)."""
        if not self._knows_schemas:
            return True
        catalog = SchemaCatalog(self._state.table(SCHEMAS_TABLE, -1).data)
        return catalog.registered(exc.fingerprint)

    def _reject(self, msg: Message, reason: str, cause: Cause) -> None:
        """Dead-letter an input record this app judges; skip another app's."""
        if self._judged is None or (msg.topic() or "") in self._judged:
            self._quarantine.dead_letter(self._member.producer, self.placement, msg, reason, cause)
        else:
            log.debug("skipped %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), reason)


_PAUSED: Any = object()


def _consume_error(msg: Message) -> None:
    error = msg.error()
    assert isinstance(error, KafkaError)
    if error.fatal():  # the consumer is unusable: surface it (a restart starts a new one)
        raise BrokerFailure(f"consume: {error.str()}", code=error.name(), kind=ErrorKind.PERMANENT)
    log.warning("consumer error on %s[%s]: %s", msg.topic(), msg.partition(), error.str())


def _put_back(msg: Message, cut: dict[tuple[str, int], int]) -> bool:
    """Whether ``msg`` is read again: at or past where its input was cut."""
    at = cut.get((msg.topic() or "", msg.partition() or 0))
    return at is not None and (msg.offset() or 0) >= at
