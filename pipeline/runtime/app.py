"""The exactly-once stream runtime every vigil consumer runs on (DESIGN §2, §4, §10).

One :class:`StreamApp` per process instance: a group member subscribed to co-partitioned inputs
(classic protocol, range assignor: partition *p* of every input lands on the same member), one
transactional producer with the stable id ``<group>-<instance>``, and keyed in-memory tables.
Each transaction holds the outputs, the changelog of what the tables became and the consumed
offsets; it commits every ``commit_every`` records or ``commit_interval_ms``. This module is the
member's lifecycle and its loop (poll, decode, dead-letter or pause, group by task partition,
catch the tables up, run the processor); its two other seams are ``transactions`` (commit,
abort, recovery, timer-driven work) and ``assignment`` (what a rebalance restores and drops).

Why not Quix Streams: it carries exactly-once, changelogged state and commit cadence well, but
its state stores are scoped to one input topic's partitions and restored from their own
changelogs only. vigil needs state shared by several co-partitioned inputs (``events`` +
``ticks`` feed one ``watcher-state``), read-only tables from topics another app writes
(``watchers`` per partition, ``grants`` and ``lifecycle`` whole) caught up to their end before
every batch, undecodable records dead-lettered inside the transaction and unknown schemas
pausing a partition, and the range assignor (Quix defaults to cooperative-sticky). Bending Quix
to that would hide more than these few hundred lines do.

Records and the processor's context live in ``processing``, the transaction cadence and commit
sequence in ``checkpoint``, tables in ``tables``. Leaves out encoding (``pipeline.kafka.serde``),
topic creation (``pipeline.kafka.topics``) and what is processed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from prometheus_client import REGISTRY, CollectorRegistry

from pipeline.kafka.clients import (
    BrokerFailure,
    ErrorKind,
    consumer_config,
    producer_config,
    table_consumer_config,
    translate,
)
from pipeline.rules.errors import BrokerError, SerdeError, UnknownSchemaError
from pipeline.runtime.assignment import Assignment
from pipeline.runtime.checkpoint import (
    Checkpoint,
    InputPositions,
    TransactionEnd,
)
from pipeline.runtime.metrics import runtime_metrics
from pipeline.runtime.poison import Quarantine
from pipeline.runtime.processing import (
    DLQ_HEADERS,
    Decoder,
    InputRecord,
    Placement,
    ProcessContext,
    Processor,
)
from pipeline.runtime.state import TaskState
from pipeline.runtime.tables import Table, TableReader, TableSpec
from pipeline.runtime.transactions import TIMEOUT_S, Transactions

__all__ = [
    "DLQ_HEADERS",
    "Decoder",
    "InputRecord",
    "ProcessContext",
    "Processor",
    "StreamApp",
    "TransactionEnd",
]

log = logging.getLogger(__name__)


class StreamApp(Transactions, Assignment):
    """An exactly-once consume → process → produce loop over co-partitioned inputs and tables.

    No network call happens until :meth:`start` (or entering the context manager).
    """

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        instance_id: str,
        inputs: list[str],
        processor: Processor,
        *,
        tables: list[TableSpec] | None = None,
        decode: Decoder | None = None,
        dead_letter_topic: str = "vigil.dead-letter",
        commit_every: int = 1000,
        commit_interval_ms: int = 100,
        max_batch: int = 500,
        static_membership: bool = False,
        producer_overrides: dict[str, Any] | None = None,
        consumer_overrides: dict[str, Any] | None = None,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.group_id = group_id
        self.instance_id = instance_id
        self.inputs = list(inputs)
        self._processor = processor
        self._decode = decode
        self._max_batch = max_batch
        self._checkpoint = Checkpoint(commit_every, commit_interval_ms / 1000, TIMEOUT_S)
        self._positions = InputPositions(TIMEOUT_S)
        self._aborts = 0
        self._resync = False
        client_id = f"{group_id}-{instance_id}"
        self._producer_config = producer_config(
            bootstrap, transactional_id=client_id, **(producer_overrides or {})
        )
        extra: dict[str, Any] = {"client.id": client_id}
        if static_membership:
            extra["group.instance.id"] = client_id
        self._consumer_config = consumer_config(
            bootstrap, group_id, **extra, **(consumer_overrides or {})
        )
        reader = TableReader(table_consumer_config(bootstrap, client_id))
        self._placement = Placement(self._topic_partitions)
        self._state = TaskState(tables or [], reader, self._placement.count)
        self._metrics = runtime_metrics(registry)
        self._quarantine = Quarantine(group_id, dead_letter_topic, self._metrics)
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._group_metadata: Any = None  # changes with every rebalance
        self._assigned: list[TopicPartition] = []

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> StreamApp:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(commit=exc is None)

    def start(self) -> None:
        """Fence older incarnations, load global tables, join the group."""
        if self._consumer is not None:
            return
        self._new_producer()
        self._state.load_globals()
        consumer = Consumer(self._consumer_config)
        consumer.subscribe(
            self.inputs, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        self._consumer = consumer

    def close(self, commit: bool = True) -> None:
        """Commit (or abort), leave the group, release clients. A member left uncertain by a
        broker failure commits nothing: its next incarnation's ``init_transactions`` (or the
        coordinator's timeout) aborts what it left open."""
        if self._consumer is not None:
            try:
                if self._resync:
                    pass
                elif commit:
                    self.commit()
                else:
                    self._abort()
            except BrokerError as exc:
                log.warning(
                    "closing %s/%s without committing: %s", self.group_id, self.instance_id, exc
                )
            self._consumer.close()  # revokes (nothing left to commit) and leaves the group
            self._consumer = None
        if self._producer is not None:
            if not self._resync:
                self._producer.flush(TIMEOUT_S)
            self._producer = None
        self._state.close()

    def run(self, stop: threading.Event | None = None) -> None:
        """Process until ``stop`` is set, then commit and leave the group."""
        stop = stop or threading.Event()
        self.start()
        try:
            while not stop.is_set():
                self.step()
        finally:
            self.close()

    def run_for(self, seconds: float, until: Callable[[], bool] | None = None) -> int:
        """Step for at most ``seconds`` or until ``until()`` holds; returns records processed."""
        self.start()
        deadline = time.monotonic() + seconds
        done = 0
        while time.monotonic() < deadline:
            done += self.step()
            if until is not None and until():
                break
        return done

    # -- the loop ------------------------------------------------------------------------

    def step(self, timeout: float = 0.05) -> int:
        """Resync if a broker failure asked for it; poll one batch, process it, commit if due.
        Returns the number of input records."""
        if self._resync:
            self.resync()
        consumer = self._require_consumer()
        try:
            messages = consumer.consume(self._max_batch, timeout)
        except KafkaException as exc:
            raise translate(exc, "consume") from exc
        done = self._process(messages) if messages else 0
        if self._checkpoint.due():
            self.commit()
        try:
            self._require_producer().poll(0)
        except KafkaException as exc:  # a fatal producer error surfaces here (fenced)
            self._recover(exc, "producer poll")
        return done

    def _process(self, messages: list[Message]) -> int:
        """Decode, group by task partition, catch tables up, run the processor."""
        groups: dict[int, list[InputRecord]] = {}
        per_topic = len(self.inputs) > 1
        consumed: dict[str, int] = {}
        decode, paused = self._decode, self._quarantine.paused
        try:
            self._checkpoint.begin(self._require_producer())
        except BrokerFailure as exc:
            if exc.kind is not ErrorKind.FATAL:
                raise
            self._rebuild()  # rewinds: this batch is read again
            return 0
        total = 0
        for msg in messages:
            if msg.error() is not None:
                self._consume_error(msg)
                continue
            partition = msg.partition() or 0
            if paused and (msg.topic(), partition) in paused:
                continue
            if decode is None:
                value: Any = msg.value()
            else:
                try:
                    value = decode(msg)
                except UnknownSchemaError as exc:
                    self._quarantine.pause(self._require_consumer(), msg, exc)
                    continue
                except SerdeError as exc:
                    self._quarantine.dead_letter(
                        self._require_producer(), self._placement, msg, exc
                    )
                    value = _DEAD
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
        if groups:
            self._run_processor(groups)
        if not per_topic:
            consumed[self.inputs[0]] = total
        for topic, count in consumed.items():
            self._metrics.consumed.labels(self.group_id, topic).inc(count)
        self._checkpoint.records += total
        return total

    def _run_processor(self, groups: dict[int, list[InputRecord]]) -> None:
        self._state.catch_up()
        producer = self._require_producer()
        table, partition_of = self._state.table, self._placement.partition_of
        try:
            for partition, records in groups.items():
                ctx = ProcessContext(
                    partition, producer.produce, producer.poll, table, partition_of
                )
                self._processor(records, ctx)
        except KafkaException as exc:  # from produce: the producer failed, not the processor
            self._recover(exc, "produce")
        except Exception:
            log.exception("processor failed: aborting the transaction")
            self._abort()
            self._rewind()
            raise

    # -- poison and unknown records ------------------------------------------------------

    def _consume_error(self, msg: Message) -> None:
        error = msg.error()
        assert isinstance(error, KafkaError)
        if error.fatal():  # the consumer is unusable: surface it (a restart starts a new one)
            raise BrokerFailure(
                f"consume: {error.str()}", code=error.name(), kind=ErrorKind.PERMANENT
            )
        log.warning("consumer error on %s[%s]: %s", msg.topic(), msg.partition(), error.str())

    # -- introspection -------------------------------------------------------------------

    @property
    def paused(self) -> frozenset[tuple[str, int]]:
        """Input partitions paused on an unknown schema: alert on them."""
        return frozenset(self._quarantine.paused)

    def tables(self) -> Iterator[Table]:
        """Every table store this member holds now."""
        yield from self._state

    # -- helpers -------------------------------------------------------------------------

    def _topic_partitions(self, topic: str) -> int:
        try:
            metadata = self._require_producer().list_topics(topic, timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise translate(exc, f"metadata of {topic}") from exc
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise BrokerError(f"topic {topic!r} does not exist")
        return len(found.partitions)

    def _new_producer(self) -> None:
        producer = Producer(self._producer_config)
        try:
            producer.init_transactions(TIMEOUT_S)
        except KafkaException as exc:
            raise translate(exc, "init transactions") from exc
        self._producer = producer

    def _drop_producer(self) -> None:
        self._producer = None

    def _require_producer(self) -> Producer:
        if self._producer is None:
            raise BrokerError("the app is not started")
        return self._producer

    def _require_consumer(self) -> Consumer:
        if self._consumer is None:
            raise BrokerError("the app is not started")
        return self._consumer


_DEAD: Any = object()
