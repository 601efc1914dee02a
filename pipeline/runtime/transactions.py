"""The transactions of a stream app member: commit, abort, recover and resync (DESIGN §4, §10).

Owns :class:`TransactionScope`: commit with the consumed offsets and group metadata (KIP-447),
abort and roll the tables back, recover (abort and rewind, or rebuild a fenced producer), resync
after an unknown outcome, the cadence and input positions, and ``run``/``begin``/``commit`` for
work no input started. Leaves out what a rebalance restores (``assignment``) and the loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaException

from pipeline.kafka.clients import BrokerFailure, ErrorKind, classify, translate
from pipeline.rules.errors import BrokerError
from pipeline.runtime.checkpoint import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Checkpoint,
    InputPositions,
    TransactionEnd,
    committed_offsets,
    start_offsets,
)
from pipeline.runtime.member import TIMEOUT_S, Member
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.runtime.poison import Quarantine
from pipeline.runtime.processing import Placement, ProcessContext
from pipeline.runtime.replication import ReplicationWatch
from pipeline.runtime.state import TaskState

__all__ = ["TIMEOUT_S", "TransactionScope"]

log = logging.getLogger(__name__)

# A group call that got no answer at all: the consumer, not the broker, is the one stuck.
_STUCK = frozenset({"_TIMED_OUT", "_TIMED_OUT_QUEUE"})


class TransactionScope:
    """Commit, abort and recovery of the member's one open transaction, and its cadence.

    ``aborts`` counts transactions rolled back so far (aborted, or lost with a fenced
    producer): views built from the tables must be rebuilt whenever it changes.
    ``pending_resync``: the transaction's outcome or the tables are uncertain; the next step
    resyncs first.
    """

    def __init__(
        self,
        member: Member,
        state: TaskState,
        quarantine: Quarantine,
        placement: Placement,
        metrics: RuntimeMetrics,
        checkpoint: Checkpoint,
        outputs: Iterable[str] = (),
    ) -> None:
        """``outputs``: what the member writes besides its tables (``replication``)."""
        self.checkpoint = checkpoint
        used = [*member.inputs, *(spec.topic for spec in state.specs.values()), *outputs]
        self.replication = ReplicationWatch(member, used, metrics)
        self.positions = InputPositions(TIMEOUT_S)
        self.aborts = 0
        self.pending_resync = False
        self._member = member
        self._state = state
        self._quarantine = quarantine
        self.placement = placement
        self._metrics = metrics
        self._group_id = member.group_id

    def due(self) -> bool:
        """Whether the open transaction should commit now (its interval, records or budget)."""
        return self.checkpoint.due()

    def begin(self) -> None:
        """Open the transaction now if none is open, for work that spans several steps and ends
        with :meth:`commit`. A fenced producer is rebuilt (tables restored, inputs rewound)
        before the ``BrokerFailure`` is raised: nothing planned from the old tables holds."""
        try:
            self.checkpoint.begin(self._member.producer)
        except BrokerFailure as exc:
            if exc.kind is ErrorKind.FATAL:
                self._rebuild()
            raise

    def context(self, partition: int) -> ProcessContext:
        """Tables and produce for ``partition`` (-1: global tables only) in the open
        transaction."""
        if not self.checkpoint.open:
            raise BrokerError("no transaction is open: begin() first")
        producer = self._member.producer
        return ProcessContext(
            partition,
            producer.produce,
            producer.poll,
            self._state.table,
            self.placement.partition_of,
        )

    def commit(self, rewind: bool = True) -> bool:
        """Commit the open transaction with the consumed offsets. False if it was aborted.

        After an abort the inputs are rewound to their committed offsets unless ``rewind`` is
        false (their partitions are being revoked).
        """
        if self.pending_resync:
            return False  # uncertain already: the resync decides what holds
        if not self.checkpoint.open:
            return True
        started = time.perf_counter()
        member = self._member
        try:
            positions = self.positions.current(member.consumer, self.positions.held)
            self.checkpoint.commit(
                member.producer,
                self._quarantine.positions(positions),
                member.group_metadata(),
                self._state.stores(),
            )
        except KafkaException as exc:
            self.recover(exc, "commit", rewind)
            return False
        self._metrics.transactions.labels(self._group_id, "committed").inc()
        self._metrics.commit_seconds.labels(self._group_id).observe(time.perf_counter() - started)
        return True

    def abort(self, restore: bool = True) -> None:
        """Abort and roll the tables back; a fatal failure rebuilds the producer instead. An
        abort the broker did not confirm leaves the member to resync (raised as retriable)."""
        self.aborts += 1
        was_open = self.checkpoint.open
        try:
            self.checkpoint.abort(self._member.producer, self._state.stores())
        except KafkaException as exc:
            if classify(exc.args[0]) is not ErrorKind.FATAL:
                raise self.uncertain(exc, "abort") from exc
            self._rebuild(restore)
            return
        if was_open:
            self._metrics.transactions.labels(self._group_id, "aborted").inc()

    def run(self, work: Callable[[Callable[[int], ProcessContext]], None]) -> TransactionEnd:
        """Run ``work(context_of)`` in the transaction (opened if none is), then commit it.

        ``context_of(partition)`` is what a processor gets for that partition. A produce
        failure recovers exactly as for an input batch (abort and rewind, or rebuild the fenced
        producer) and ends it aborted; any other exception aborts, rewinds and is raised.
        """
        try:
            self.begin()
        except BrokerFailure as exc:
            if exc.kind is not ErrorKind.FATAL:
                raise
            return TransactionEnd.ABORTED
        try:
            work(self.context)
        except KafkaException as exc:  # from produce: the producer failed, not the work
            self.recover(exc, "produce")
            return TransactionEnd.ABORTED
        except Exception:
            log.exception("timer-driven transaction failed: aborting it")
            self.abort()
            self.rewind()
            raise
        return TransactionEnd.COMMITTED if self.commit() else TransactionEnd.ABORTED

    def recover(self, exc: KafkaException, context: str, rewind: bool = True) -> None:
        """Abort and rewind (abortable), rebuild the producer and restore (fatal), or leave the
        member to resync and raise (retriable: the outcome is unknown; permanent: surfaced).

        ``rewind`` false: the partitions are leaving (revoke), so nothing is restored.
        """
        kind = classify(exc.args[0])
        log.warning("%s failed (%s): %s", context, kind.value, exc)
        if kind is ErrorKind.FATAL:
            self._rebuild(restore=rewind)
            return
        if kind is not ErrorKind.ABORTABLE:
            raise self.uncertain(exc, context, kind) from exc
        self.abort(restore=rewind)
        if rewind:
            self.rewind()

    def uncertain(
        self, exc: KafkaException, context: str, kind: ErrorKind = ErrorKind.RETRIABLE
    ) -> BrokerFailure:
        """Mark the member for a resync; the failure to raise (permanent stays permanent)."""
        self.pending_resync = True
        if kind is not ErrorKind.PERMANENT:
            kind = ErrorKind.RETRIABLE
        return translate(exc, context, kind)

    def request_resync(self, reason: BaseException | str) -> None:
        """A step failed where the transaction or the tables may not match the broker: resync
        before the next one does anything."""
        if not self.pending_resync:
            log.warning("%s/%s will resync: %s", self._group_id, self._member.instance_id, reason)
        self.pending_resync = True

    def resync_if_asked(self) -> None:
        """Resync first if a failure left the member uncertain (:meth:`request_resync`)."""
        if self.pending_resync:
            self.resync()

    def resync(self) -> None:
        """Rebuild the producer, restore the assigned partitions' tables, rewind the inputs
        (see the module docstring). Raises a retriable ``BrokerFailure`` while the broker
        cannot answer: call it again after a pause. Partitions short of in-sync replicas,
        which the member's writes wait for, are named first (``replication``)."""
        self._metrics.resyncs.labels(self._group_id).inc()
        self.replication.look()
        self._rebuild(restore=True)
        log.warning("%s/%s resynced", self._group_id, self._member.instance_id)

    def _rebuild(self, restore: bool = True) -> None:
        """A fenced or fatally failed producer, or an uncertain state: start a new producer,
        drop the tables' uncommitted state and (unless the partitions are leaving) restore them
        and rewind the inputs. Until all of that is done the member stays marked to resync."""
        log.warning("rebuilding the transactional producer of %s", self._member.instance_id)
        self.pending_resync = True
        self.aborts += 1
        self.checkpoint.ended()
        self._member.start_producer()
        numbers = {tp.partition for tp in self.positions.held}
        self._state.drop(numbers)
        if restore:
            self.rewind(self._state.restore(numbers))
        self.pending_resync = False

    def rewind(self, reflected: dict[int, dict[str, int]] | None = None) -> None:
        """Seek every assigned input back to where the committed state says it resumes; a
        rewind that fails half-way leaves the member to resync."""
        held = self.positions.held
        if not held:
            return
        was, self.pending_resync = self.pending_resync, True
        consumer = self._member.consumer
        try:
            committed = committed_offsets(consumer, held, TIMEOUT_S)
        except BrokerFailure as exc:
            if exc.code not in _STUCK:
                raise
            # The producer just reached the broker (a rebuild or an abort answered), yet the
            # consumer's group coordinator does not: a client stuck on a coordinator it lost
            # (librdkafka #5511, after a broker restart). A new consumer finds it again.
            self._member.replace_consumer(exc)
            self.pending_resync = False
            return
        starts = start_offsets(committed, reflected or {})
        for tp in starts:
            if tp.offset == OFFSET_INVALID:
                tp.offset = OFFSET_BEGINNING
            try:
                consumer.seek(tp)
            except KafkaException as exc:
                # _STATE (retriable): the partition's new assignment is still being applied (a
                # rebalance met the resync): the member stays marked and the next resync seeks.
                raise translate(exc, f"seek {tp.topic}[{tp.partition}]") from exc
        self.positions.resumed(starts)
        self.pending_resync = was

    def close(self, commit: bool) -> None:
        """Commit (or abort) what is open before the member leaves. A member left uncertain by
        a broker failure commits nothing: its next incarnation's ``init_transactions`` (or the
        coordinator's timeout) aborts what it left open."""
        try:
            if self.pending_resync:
                return
            if commit:
                self.commit()
            else:
                self.abort()
        except BrokerError as exc:
            log.warning(
                "closing %s/%s without committing: %s",
                self._group_id,
                self._member.instance_id,
                exc,
            )
