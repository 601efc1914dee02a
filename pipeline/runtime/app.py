"""The exactly-once stream runtime every vigil stage runs on (DESIGN §2, §4, §10).

Owns :class:`StreamApp`: one group member over co-partitioned inputs, one transactional producer
(``<group>-<instance>``) and keyed tables, wired from ``member``, ``transactions``,
``assignment``, ``state``, ``poison`` and ``batch``; its step reads resync if asked → poll →
decode → process → commit if due. Leaves out encoding, topic creation and what is processed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaException
from prometheus_client import REGISTRY, CollectorRegistry

from pipeline.kafka.clients import Producer as PlainProducer
from pipeline.kafka.clients import (
    consumer_config,
    producer_config,
    table_consumer_config,
)
from pipeline.kafka.schema_catalog import register_schemas
from pipeline.kafka.serde import AvroCodec
from pipeline.runtime.assignment import Assignment, GroupProtocol, group_protocol_config
from pipeline.runtime.batch import SCHEMAS_TABLE, Batches, BatchOptions, first_arrivals, gather
from pipeline.runtime.checkpoint import Checkpoint, TransactionEnd
from pipeline.runtime.member import TIMEOUT_S, Member
from pipeline.runtime.metrics import runtime_metrics
from pipeline.runtime.poison import Quarantine
from pipeline.runtime.processing import (
    Decoder,
    InputRecord,
    Placement,
    ProcessContext,
    Processor,
)
from pipeline.runtime.state import TaskState
from pipeline.runtime.tables import TableKind, TableReader, TableSpec
from pipeline.runtime.transactions import TransactionScope

__all__ = [
    "SCHEMAS_TABLE",
    "Decoder",
    "GroupProtocol",
    "InputRecord",
    "ProcessContext",
    "Processor",
    "StreamApp",
    "TransactionEnd",
    "TransactionScope",
]

log = logging.getLogger(__name__)

# A transaction stops taking records after this share of its timeout: the rest commits in time.
_BUDGET_SHARE = 3


class StreamApp:
    """An exactly-once consume → process → produce loop over co-partitioned inputs and tables.

    No network call happens until :meth:`start` (or entering the context manager).

    ``schemas_topic``: the ``schemas`` topic, read whole to tell a newer writer's schema from
    garbage (without it an unknown fingerprint always pauses); ``codec``: the schemas
    this app writes, registered there at :meth:`start`; ``judged``: the inputs whose
    undecodable records this app dead-letters (default all) — another app's inputs it merely
    skips, so a record shared by two groups is dead-lettered once; ``group_protocol``:
    ``consumer`` (KIP-848) rebalances incrementally, ``classic`` (eager) works on every broker
    (``pipeline.runtime.assignment``); ``slice_records``: how many records of a task partition
    the processor gets per call (default all of the batch's), the points where a batch may be
    cut to fit the transaction timeout; ``outputs``: the topics the processor writes besides
    the tables' (named with the inputs and tables when a resync waits on partitions short of
    in-sync replicas, ``replication``).
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
        metrics_registry: CollectorRegistry = REGISTRY,
        schemas_topic: str | None = None,
        codec: AvroCodec | None = None,
        judged: Collection[str] | None = None,
        group_protocol: GroupProtocol = GroupProtocol.CLASSIC,
        outputs: Collection[str] = (),
    ) -> None:
        self.group_id = group_id
        self.instance_id = instance_id
        self.inputs = list(inputs)
        client_id = f"{group_id}-{instance_id}"
        metrics = runtime_metrics(metrics_registry)
        metrics.group_protocol.labels(group_id, group_protocol.value).set(1)
        producer = producer_config(
            bootstrap, transactional_id=client_id, **(producer_overrides or {})
        )
        consumer = _consumer_config(
            bootstrap, group_id, client_id, static_membership, consumer_overrides, group_protocol
        )
        member = self._member = Member(
            group_id, instance_id, self.inputs, producer, consumer, metrics
        )
        placement = Placement(member.partition_count)
        specs = [*(tables or []), *_schemas_table(schemas_topic)]
        reader = TableReader(table_consumer_config(bootstrap, client_id))
        state = self._state = TaskState(specs, reader, placement.count)
        quarantine = self._quarantine = Quarantine(group_id, dead_letter_topic, metrics)
        budget_s = member.transaction_timeout_s / _BUDGET_SHARE
        checkpoint = Checkpoint(commit_every, commit_interval_ms / 1000, TIMEOUT_S, budget_s)
        scope = self._scope = TransactionScope(
            member, state, quarantine, placement, metrics, checkpoint, (dead_letter_topic, *outputs)
        )
        options = BatchOptions(
            max_batch, slice_records or max_batch, _judged(judged), schemas_topic is not None
        )
        batches = self._batches = Batches(
            member, scope, state, quarantine, metrics, processor, decode, options
        )
        self._assignment = Assignment(
            group_protocol, state, scope, member, quarantine, batches.isolation, metrics
        )
        self._schemas = (bootstrap, schemas_topic, codec, placement)

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
        """Fence older incarnations, register this app's schemas, load global tables, join
        the group."""
        if self._member.joined:
            return
        self._member.start_producer()
        _register_schemas(*self._schemas)
        self._state.load_globals()
        self._member.join(self._assignment)

    def close(self, commit: bool = True) -> None:
        """Commit (or abort), leave the group, release clients. A member left uncertain by a
        broker failure commits nothing (``TransactionScope.close``)."""
        if self._member.joined:
            self._scope.close(commit)
            self._member.leave()  # revokes (nothing left to commit) and leaves the group
        self._member.drop_producer(flush=not self._scope.pending_resync)
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
        """Resync if asked → poll → decode → process → commit if due. Returns the number of
        input records.

        A batch fills for up to ``timeout`` (a window, not a wait per record: returning at the
        first record made batches small, and per-batch work — table catch-up, the budget round
        trip — cost ~7% more CPU per event in the benchmark), but never past the moment the
        transaction falls due (:func:`~pipeline.runtime.batch.gather`): the commit is issued
        when the interval has passed, not a window later. While a failed batch is replayed
        (``isolation``), one record per step, each committed on its own."""
        self._scope.resync_if_asked()
        done = self._batches.take(gather, timeout)
        if self._scope.due():
            self._scope.commit()
        self._serve_producer()
        return done

    def read(self, timeout: float = 0.05) -> int:
        """The step of a stage that commits its own transactions (:meth:`transaction`):
        resync if asked → the first records that arrive → decode → process, in the open
        transaction, which this call leaves open (a replay of a failed batch commits record
        by record). Returns the number of input records."""
        self._scope.resync_if_asked()
        done = self._batches.take(first_arrivals, timeout)
        self._serve_producer()
        return done

    def _serve_producer(self) -> None:
        """Delivery reports and errors; a fatal producer error surfaces here (fenced)."""
        try:
            self._member.producer.poll(0)
        except KafkaException as exc:
            self._scope.recover(exc, "producer poll")

    # -- handles -------------------------------------------------------------------------

    def transaction(self) -> TransactionScope:
        """The member's transactions, for work no input record started (a retry or a tick
        falls due): ``run(work)``, or ``begin``, ``context``, ``commit`` across steps;
        ``aborts`` to notice a rollback."""
        return self._scope

    @property
    def tables(self) -> TaskState:
        """The tables this member holds now, by name (``table``, ``stores_of``, ``whole``)."""
        return self._state

    def assignment(self) -> list[tuple[str, int]]:
        """The input partitions this member holds now."""
        return self._assignment.held()

    @property
    def paused(self) -> frozenset[tuple[str, int]]:
        """Input partitions paused on an unknown schema: alert on them."""
        return frozenset(self._quarantine.paused)

    def request_resync(self, reason: BaseException | str) -> None:
        """A step failed where the transaction or the tables may not match the broker: the
        next step resyncs first."""
        self._scope.request_resync(reason)


def _consumer_config(
    bootstrap: str,
    group_id: str,
    client_id: str,
    static_membership: bool,
    overrides: dict[str, Any] | None,
    protocol: GroupProtocol,
) -> dict[str, Any]:
    """The member's consumer settings: its client id (and instance id when static)."""
    extra: dict[str, Any] = {"client.id": client_id}
    if static_membership:
        extra["group.instance.id"] = client_id
    return group_protocol_config(
        consumer_config(bootstrap, group_id, **extra, **(overrides or {})), protocol
    )


def _judged(inputs: Collection[str] | None) -> frozenset[str] | None:
    return None if inputs is None else frozenset(inputs)


def _schemas_table(topic: str | None) -> list[TableSpec]:
    """The ``schemas`` topic as a global table, when the app is given one."""
    return [] if topic is None else [TableSpec(SCHEMAS_TABLE, topic, TableKind.GLOBAL)]


def _register_schemas(
    bootstrap: str,
    topic: str | None,
    schemas: AvroCodec | None,
    placement: Placement,
) -> None:
    """Register the schemas this app writes before its first record (DESIGN.md §10)."""
    if topic is None or schemas is None:
        return
    producer = PlainProducer(bootstrap)
    try:
        register_schemas(producer, topic, placement.count(topic), schemas)
    finally:
        producer.close()
