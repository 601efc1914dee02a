"""The exactly-once stream runtime every vigil consumer runs on (DESIGN §2, §4, §10).

One :class:`StreamApp` per process instance: a group member subscribed to co-partitioned inputs
(a range assignor: partition *p* of every input lands on the same member; the classic protocol
by default, KIP-848's incremental one on request, see ``assignment``), one
transactional producer with the stable id ``<group>-<instance>``, and keyed in-memory tables.
Each transaction holds the outputs, the changelog of what the tables became and the consumed
offsets; it commits every ``commit_every`` records or ``commit_interval_ms``. This module is the
member's lifecycle and its loop (poll, decode, dead-letter or pause, group by task partition,
catch the tables up, run the processor); its two other seams are ``transactions`` (commit,
abort, recovery, timer-driven work) and ``assignment`` (what a rebalance restores and drops).

No record can stop the process (DESIGN.md §10 "Hostile input"): whatever a decoder raises
dead-letters that record; a schema fingerprint this build does not know is looked up in the
``schemas`` topic (held as a global table, its own build's schemas registered at start) — a
newer writer's pauses the partition, garbage is dead-lettered; and a processor that raises on a
batch has it replayed one record per transaction (``isolation``) until the record to blame is
found and dead-lettered. Only the broker's and the budget store's own failures propagate: the
record is not to blame for those, and the caller backs off and retries.

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
from collections.abc import Callable, Collection, Iterator
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from prometheus_client import REGISTRY, CollectorRegistry

from pipeline.kafka.clients import (
    BrokerFailure,
    ErrorKind,
    consumer_config,
    producer_config,
    retire,
    table_consumer_config,
    translate,
)
from pipeline.kafka.clients import Producer as PlainProducer
from pipeline.kafka.schema_catalog import SchemaCatalog, register_schemas
from pipeline.kafka.serde import SchemaRegistry
from pipeline.rules.errors import BrokerError, InfrastructureError, UnknownSchemaError
from pipeline.runtime.assignment import Assignment, GroupProtocol, group_protocol_config
from pipeline.runtime.checkpoint import (
    Checkpoint,
    InputPositions,
    TransactionEnd,
)
from pipeline.runtime.isolation import Isolation, failure_reason
from pipeline.runtime.metrics import runtime_metrics
from pipeline.runtime.poison import Cause, Quarantine
from pipeline.runtime.processing import (
    DLQ_HEADERS,
    Decoder,
    InputRecord,
    Placement,
    ProcessContext,
    Processor,
)
from pipeline.runtime.state import TaskState
from pipeline.runtime.tables import Table, TableKind, TableReader, TableSpec
from pipeline.runtime.transactions import TIMEOUT_S, Transactions

__all__ = [
    "DLQ_HEADERS",
    "Decoder",
    "GroupProtocol",
    "InputRecord",
    "ProcessContext",
    "Processor",
    "StreamApp",
    "TransactionEnd",
]

log = logging.getLogger(__name__)

SCHEMAS_TABLE = "vigil.schemas"
"""The global table of the ``schemas`` topic (a name no stage's own table takes)."""
# A transaction stops taking records after this share of its timeout: the rest commits in time.
_BUDGET_SHARE = 3

_SLICE_S = 0.005  # an eager step's slices of its window
_RETIRE_S = 10.0  # how long a replaced consumer may take to leave its group


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
        slice_records: int | None = None,
        static_membership: bool = False,
        producer_overrides: dict[str, Any] | None = None,
        consumer_overrides: dict[str, Any] | None = None,
        registry: CollectorRegistry = REGISTRY,
        schemas_topic: str | None = None,
        schema_registry: SchemaRegistry | None = None,
        judged: Collection[str] | None = None,
        group_protocol: GroupProtocol = GroupProtocol.CLASSIC,
    ) -> None:
        """``schemas_topic``: the ``schemas`` topic, read whole to tell a newer writer's schema
        from garbage (without it an unknown fingerprint always pauses); ``schema_registry``:
        the schemas this app writes, registered there at :meth:`start`; ``judged``: the inputs
        whose undecodable records this app dead-letters (default all) — another app's inputs
        it merely skips, so a record shared by two groups is dead-lettered once;
        ``group_protocol``: ``consumer`` (KIP-848) rebalances incrementally, ``classic``
        (eager) works on every broker (``pipeline.runtime.assignment``); ``slice_records``:
        how many records of a task partition the processor gets per call (default all of the
        batch's), the points where a batch may be cut to fit the transaction timeout."""
        self.group_id = group_id
        self.instance_id = instance_id
        self.inputs = list(inputs)
        self._processor = processor
        self._decode = decode
        self._max_batch = max_batch
        self._slice = slice_records or max_batch
        client_id = f"{group_id}-{instance_id}"
        self._producer_config = producer_config(
            bootstrap, transactional_id=client_id, **(producer_overrides or {})
        )
        budget_s = int(self._producer_config["transaction.timeout.ms"]) / 1000 / _BUDGET_SHARE
        self._checkpoint = Checkpoint(
            commit_every, commit_interval_ms / 1000, TIMEOUT_S, budget_s=budget_s
        )
        self._positions = InputPositions(TIMEOUT_S)
        self._aborts = 0
        self._resync = False
        extra: dict[str, Any] = {"client.id": client_id}
        if static_membership:
            extra["group.instance.id"] = client_id
        self._protocol = group_protocol
        self._consumer_config = group_protocol_config(
            consumer_config(bootstrap, group_id, **extra, **(consumer_overrides or {})),
            group_protocol,
        )
        reader = TableReader(table_consumer_config(bootstrap, client_id))
        self._placement = Placement(self._topic_partitions)
        specs = list(tables or [])
        if schemas_topic is not None:
            specs.append(TableSpec(SCHEMAS_TABLE, schemas_topic, TableKind.GLOBAL))
        self._bootstrap = bootstrap
        self._schemas_topic = schemas_topic
        self._schema_registry = schema_registry
        self._judged = None if judged is None else frozenset(judged)
        self._isolation = Isolation()
        self._state = TaskState(specs, reader, self._placement.count)
        self._metrics = runtime_metrics(registry)
        self._metrics.group_protocol.labels(group_id, group_protocol.value).set(1)
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
        self._register_schemas()
        self._state.load_globals()
        self._new_consumer()

    def _new_consumer(self) -> None:
        """Join the group with a new consumer. Its callbacks act only while it is the member's
        consumer: one being retired (``_replace_consumer``) gives its partitions up silently."""
        consumer = Consumer(self._consumer_config)

        def current(callback: Callable[[Consumer, list[TopicPartition]], None]) -> Any:
            def call(member: Consumer, partitions: list[TopicPartition]) -> None:
                if member is self._consumer:
                    callback(member, partitions)

            return call

        self._consumer = consumer
        consumer.subscribe(
            self.inputs,
            on_assign=current(self._on_assign),
            on_revoke=current(self._on_revoke),
            on_lost=current(self._on_lost),
        )

    def _replace_consumer(self, reason: BaseException) -> None:
        """Retire a consumer that gets no answer from its group and join with a new one: what
        the member held is given up (tables, positions), as if the partitions were lost, and
        comes back through the new consumer's assignment. The old one leaves the group on a
        thread of its own, abandoned if it does not within ``_RETIRE_S``."""
        log.warning(
            "%s/%s replaces its consumer (no answer from its group): %s",
            self.group_id,
            self.instance_id,
            reason,
        )
        self._metrics.consumer_replacements.labels(self.group_id).inc()
        old = self._consumer
        self._release(list(self._assigned))
        self._new_consumer()
        if old is not None and not retire(old, _RETIRE_S):
            log.warning("%s: the retired consumer did not close; abandoned", self.group_id)

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

    def step(self, timeout: float = 0.05, eager: bool = False, commit_due: bool = True) -> int:
        """Resync if a broker failure asked for it; poll one batch, process it, commit if due
        (unless ``commit_due`` is false: a caller that commits at the end of its own turn, see
        :meth:`due`). Returns the number of input records.

        A batch fills for up to ``timeout`` (a window, not a wait per record: returning at the
        first record made batches small, and per-batch work — table catch-up, the budget round
        trip — cost ~7% more CPU per event in the benchmark), but never past the moment the
        transaction falls due (:meth:`~pipeline.runtime.checkpoint.Checkpoint.due_at`): the
        commit is issued when the interval has passed, not a window later. ``eager``: return
        the first records that arrive (a caller that commits every turn gains nothing by
        waiting for more).

        While a failed batch is replayed (``isolation``), one record per step, each committed
        on its own: the transaction of the record to blame holds nothing else."""
        if self._resync:
            self.resync()
        consumer = self._require_consumer()
        isolating = self._isolation.active
        if isolating and self._checkpoint.open:
            self.commit()
        try:
            if isolating:
                messages = consumer.consume(1, timeout)
            else:
                messages = self._poll(consumer, timeout, eager)
        except KafkaException as exc:
            raise translate(exc, "consume") from exc
        done, settled = self._process(messages, isolating) if messages else (0, False)
        if isolating:
            if self.commit() and settled:
                for msg in messages:
                    if msg.error() is None:
                        self._isolation.passed(
                            msg.topic() or "", msg.partition() or 0, msg.offset() or 0
                        )
        elif commit_due and self._checkpoint.due():
            self.commit()
        try:
            self._require_producer().poll(0)
        except KafkaException as exc:  # a fatal producer error surfaces here (fenced)
            self._recover(exc, "producer poll")
        return done

    def due(self) -> bool:
        """Whether the open transaction should commit now (its interval, records or budget)."""
        return self._checkpoint.due()

    def _poll(self, consumer: Consumer, timeout: float, eager: bool) -> list[Message]:
        """One batch, always from one ``consume`` call: a record handed out by one call and kept
        through the next could outlive a rebalance served inside that call, whose revocation
        commits offsets past it (an input lost; the chaos test found it).

        An open transaction: records until the window (``timeout``) closes or it falls due. None
        open and not due yet: the whole window, as a batch. Due at once (a quiet spell) or
        ``eager``: the first records that arrive, read in short slices of the window."""
        start = time.monotonic()
        due_at = self._checkpoint.due_at()
        if self._checkpoint.open:
            return consumer.consume(self._max_batch, max(0.0, min(start + timeout, due_at) - start))
        if not eager and due_at > start:
            return consumer.consume(self._max_batch, timeout)
        deadline = start + timeout
        while True:
            left = deadline - time.monotonic()
            batch = consumer.consume(self._max_batch, max(0.0, min(_SLICE_S, left)))
            if batch or left <= _SLICE_S:
                return batch

    def _process(self, messages: list[Message], isolating: bool = False) -> tuple[int, bool]:
        """Decode, group by task partition, catch tables up, run the processor. Returns the
        number of input records settled (not put back for the next step) and whether they were
        settled (not rolled back)."""
        groups: dict[int, list[InputRecord]] = {}
        per_topic = len(self.inputs) > 1
        consumed: dict[str, int] = {}
        rejected: list[tuple[Message, str, Cause]] = []  # dead-lettered unless put back
        decode, paused = self._decode, self._quarantine.paused
        caught_up = False
        try:
            self._checkpoint.begin(self._require_producer())
        except BrokerFailure as exc:
            if exc.kind is not ErrorKind.FATAL:
                raise
            self._rebuild()  # rewinds: this batch is read again
            return 0, False
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
                    if not caught_up:  # once per batch: after every record of it was read
                        self._state.catch_up()
                        caught_up = True
                    if self._newer_writer(exc):
                        self._quarantine.pause(self._require_consumer(), msg, exc)
                        continue
                    reason = f"{exc}: registered by no writer (garbage)"
                    rejected.append((msg, reason, Cause.UNREGISTERED_SCHEMA))
                    value = _DEAD
                except Exception as exc:  # whatever a decoder raises, the record is to blame
                    rejected.append((msg, str(exc) or type(exc).__name__, Cause.UNDECODABLE))
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
        rest = self._run_processor(groups, isolating) if groups else []
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
            self._recover(exc, "dead letter")
            return total, False
        if not per_topic:
            consumed[self.inputs[0]] = total
        for record in rest:  # counted when they are read again
            consumed[record.topic] -= 1
        total -= len(rest)
        for topic, count in consumed.items():
            self._metrics.consumed.labels(self.group_id, topic).inc(count)
        self._checkpoint.records += total
        return total, True

    def _run_processor(
        self, groups: dict[int, list[InputRecord]], isolating: bool
    ) -> list[InputRecord] | None:
        """Run the processor on each task partition's records, ``slice_records`` at a time.
        Returns the records put back (not run), or None if it rolled back.

        Once the transaction is :meth:`~pipeline.runtime.checkpoint.Checkpoint.overdue`, the
        slices not run yet are put back — each input sought to its first record not run, read
        again by the next step — so the transaction commits before its timeout aborts it (and
        fences the producer) and no batch, however slow its records, is redone forever."""
        self._state.catch_up()
        producer = self._require_producer()
        table, partition_of = self._state.table, self._placement.partition_of
        size = self._slice
        slices = [
            (partition, records[start : start + size])
            for partition, records in groups.items()
            for start in range(0, len(records), size)
        ]
        cut_at = len(slices)
        try:
            for n, (partition, records) in enumerate(slices):
                if n and self._checkpoint.overdue():
                    cut_at = n
                    break
                ctx = ProcessContext(
                    partition, producer.produce, producer.poll, table, partition_of
                )
                self._processor(records, ctx)
        except KafkaException as exc:  # from produce: the producer failed, not the processor
            self._recover(exc, "produce")
            return None
        except InfrastructureError:  # not the record's: abort, rewind, propagate
            log.exception("processor failed: aborting the transaction")
            self._abort()
            self._rewind()
            raise
        except Exception as exc:
            self._processing_failed(groups, exc, isolating)
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
        consumer = self._require_consumer()
        for (topic, partition), offset in cut.items():
            try:
                consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:
                raise self._uncertain(exc, f"seek {topic}[{partition}]") from exc
        self._metrics.batches_cut.labels(self.group_id).inc()
        log.info(
            "%s: batch cut after %.1fs to commit within the transaction timeout; "
            "%d records put back",
            self.group_id,
            self._checkpoint.budget_s,
            len(rest),
        )
        return cut

    # -- poison and unknown records ------------------------------------------------------

    def _processing_failed(
        self, groups: dict[int, list[InputRecord]], exc: Exception, isolating: bool
    ) -> None:
        """Dead-letter the record to blame when it ran alone; else replay the batch one record
        per transaction to find it."""
        records = [record for batch in groups.values() for record in batch]
        if isolating and len(records) == 1:
            (record,) = records
            self._abort()  # the transaction held this record alone: nothing else is undone
            self.begin()
            self._quarantine.dead_letter(
                self._require_producer(),
                self._placement,
                record.message,
                failure_reason(exc),
                Cause.PROCESSING_FAILED,
            )
            log.error("processing %r failed", record, exc_info=exc)
            if self.commit():
                self._isolation.passed(record.topic, record.partition, record.offset)
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
        self._abort()
        self._rewind()
        self._isolation.enter(last)

    def _newer_writer(self, exc: UnknownSchemaError) -> bool:
        """Whether an unknown fingerprint is registered (a newer writer) rather than garbage;
        without a ``schemas`` topic it is always taken for a newer writer (pause, never lose)."""
        if self._schemas_topic is None:
            return True
        catalog = SchemaCatalog(self._state.table(SCHEMAS_TABLE, -1).data)
        return catalog.registered(exc.fingerprint)

    def _reject(self, msg: Message, reason: str, cause: Cause) -> Any:
        """Dead-letter an input record this app judges; skip another app's. Returns _DEAD."""
        if self._judged is None or (msg.topic() or "") in self._judged:
            self._quarantine.dead_letter(
                self._require_producer(), self._placement, msg, reason, cause
            )
        else:
            log.debug("skipped %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), reason)
        return _DEAD

    def _register_schemas(self) -> None:
        """Register the schemas this app writes before its first record (DESIGN.md §10)."""
        if self._schemas_topic is None or self._schema_registry is None:
            return
        producer = PlainProducer(self._bootstrap)
        try:
            count = self._placement.count(self._schemas_topic)
            register_schemas(producer, self._schemas_topic, count, self._schema_registry)
        finally:
            producer.close()

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


def _put_back(msg: Message, cut: dict[tuple[str, int], int]) -> bool:
    """Whether ``msg`` is read again: at or past where its input was cut."""
    at = cut.get((msg.topic() or "", msg.partition() or 0))
    return at is not None and (msg.offset() or 0) >= at
