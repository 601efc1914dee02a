"""The open transaction of a stream app: when it is due, how it commits, where input resumes.

Owns :class:`Checkpoint` (due after ``commit_every`` records, ``interval_s`` after the last
transaction ended, or at once after ``budget_s``, a third of the transaction timeout),
:class:`InputPositions` (the offsets a commit sends, KIP-447) and :func:`start_offsets`. Leaves
out recovery decisions (``transactions``); it reads a monotonic clock only for the cadence.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from pipeline.kafka.clients import BrokerFailure, ErrorKind, translate
from pipeline.runtime.processing import Headers
from pipeline.runtime.tables import OFFSETS_HEADER, Table, encode_offsets

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_INVALID",
    "Checkpoint",
    "InputPositions",
    "TransactionEnd",
    "committed_offsets",
    "resume_positions",
    "send_offsets",
    "start_offsets",
]

log = logging.getLogger(__name__)

OFFSET_BEGINNING = -2
_OFFSETS_S = 10.0  # sending offsets takes milliseconds; longer means a coordinator is away
_SEND_OFFSETS_GRACE_S = 2.0
OFFSET_INVALID = -1001


class TransactionEnd(enum.Enum):
    """How a transaction ended. Aborted: the tables are back at the last commit and the inputs
    rewound to it, so whatever was planned from them must be planned again."""

    COMMITTED = "committed"
    ABORTED = "aborted"


class Checkpoint:
    """The transaction cadence and commit sequence of one transactional producer."""

    __slots__ = (
        "_begun",
        "_clock",
        "_ended",
        "budget_s",
        "commit_every",
        "interval_s",
        "open",
        "records",
        "timeout_s",
    )

    def __init__(
        self,
        commit_every: int,
        interval_s: float,
        timeout_s: float = 30.0,
        budget_s: float = float("inf"),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.commit_every = commit_every
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.budget_s = budget_s
        self.open = False
        self.records = 0
        self._clock = clock
        self._begun = 0.0
        self._ended = -float("inf")  # when the last transaction ended (none yet: long ago)

    def begin(self, producer: Producer) -> None:
        if self.open:
            return
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            raise translate(exc, "begin transaction") from exc
        self.open = True
        self.records = 0
        self._begun = self._clock()

    def due_at(self) -> float:
        """When the open transaction (or one begun now) falls due by the clock: ``interval_s``
        after the previous one ended, or when it has been open its budget if that is sooner."""
        due = self._ended + self.interval_s
        return min(due, self._begun + self.budget_s) if self.open else due

    def due(self) -> bool:
        return self.open and (self.records >= self.commit_every or self._clock() >= self.due_at())

    def overdue(self) -> bool:
        """Open for its whole budget: process nothing more in it, commit it now."""
        return self.open and self._clock() - self._begun >= self.budget_s

    def ended(self) -> None:
        """The open transaction committed or aborted: the next one is due an interval later."""
        self.open = False
        self.records = 0
        self._ended = self._clock()

    def commit(
        self,
        producer: Producer,
        positions: list[TopicPartition],
        group_metadata: Any,
        stores: Iterable[Table],
    ) -> None:
        """Changelogs, offsets, end of transaction. Raises ``KafkaException`` on failure."""
        stores = list(stores)
        write_changelogs(producer, stores, positions)
        if positions:  # empty only when no partition is held: there is no group to fence with
            send_offsets(producer, positions, group_metadata, min(self.timeout_s, _OFFSETS_S))
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                producer.commit_transaction(self.timeout_s)
                break
            except KafkaException as exc:  # retriable: librdkafka asks to call it again
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise
                log.warning("commit not confirmed yet, asking again: %s", exc.args[0].str())
        self.ended()
        for store in stores:
            store.committed()

    def abort(self, producer: Producer, stores: Iterable[Table]) -> None:
        """Roll the tables back to the last commit and abort. Raises ``KafkaException``."""
        for store in stores:
            store.rollback()
        if not self.open:
            return
        self.ended()
        producer.abort_transaction(self.timeout_s)


def send_offsets(
    producer: Producer,
    positions: list[TopicPartition],
    group_metadata: Any,
    timeout_s: float,
    grace_s: float = _SEND_OFFSETS_GRACE_S,
) -> None:
    """``send_offsets_to_transaction``, given up on (a retriable ``_TIMED_OUT``) when it has
    not returned a little after ``timeout_s``.

    librdkafka does not enforce that call's timeout (confluentinc/librdkafka#5456, #5511): after
    a broker restart it can wait forever for a group coordinator it cached. The call runs on a
    daemon thread; one that never returns is abandoned with its producer, which the member's
    resync replaces (its new ``init_transactions`` fences the old one).
    """
    failure: list[BaseException] = []

    def call() -> None:
        try:
            producer.send_offsets_to_transaction(positions, group_metadata, timeout_s)
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=call, name="send-offsets", daemon=True)
    worker.start()
    worker.join(timeout_s + grace_s)
    if worker.is_alive():
        raise KafkaException(
            KafkaError(
                KafkaError._TIMED_OUT,
                f"send_offsets_to_transaction did not return within {timeout_s:g}s",
                retriable=True,
            )
        )
    if failure:
        raise failure[0]


class InputPositions:
    """The offset of every assigned input that a transaction commits.

    librdkafka reports a position only for a partition that delivered a record since it was
    assigned or sought. After a restart with nothing new (the usual case for a timer-driven
    transaction: a retry falls due, a tick is due) it reports none, and a transaction that sends
    no offsets carries no group metadata: a zombie's would commit (KIP-447 fences only through
    ``send_offsets_to_transaction``, DESIGN.md §4). Such a partition commits where it resumed
    instead: the offset it was assigned or rewound to.

    A partition with neither (nothing committed, nothing delivered: an empty input such as
    ``ticks`` in a world without polls) is left out of the offsets while another one carries
    them: the group metadata fences all the same, and left uncommitted it resumes where
    ``auto.offset.reset=earliest`` starts it, exactly where an offset of its low watermark
    would. Only when no partition has an offset is one low watermark looked up (once per
    assignment) — from the consumer's cache when it has one, since an uncached lookup queues
    behind the consumer's own long-polling fetch on the same connection (``fetch.wait.max.ms``:
    half a second, on every commit that needed one).
    """

    __slots__ = ("_starts", "held", "timeout_s")

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self.held: list[TopicPartition] = []  # the input partitions the member holds now
        self._starts: dict[tuple[str, int], int] = {}

    def hold(self, partitions: Iterable[TopicPartition], *, more: bool = False) -> None:
        """The member holds ``partitions`` now (``more``: as well as what it held)."""
        added = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        self.held = [*self.held, *added] if more else added

    def release(self, gone: set[tuple[str, int]]) -> None:
        """``gone`` left the member: no longer held, where they resume no longer known."""
        self.held = [tp for tp in self.held if (tp.topic, tp.partition) not in gone]
        self.forget(gone)

    def resumed(self, starts: Iterable[TopicPartition]) -> None:
        """Inputs were assigned or sought to ``starts`` (negative: the broker decides)."""
        for tp in starts:
            self._starts[(tp.topic, tp.partition)] = tp.offset

    def forget(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """``partitions`` (default: all) left: where they resume is no longer known."""
        if partitions is None:
            self._starts.clear()
            return
        for where in partitions:
            self._starts.pop(where, None)

    def current(self, consumer: Consumer, assigned: list[TopicPartition]) -> list[TopicPartition]:
        """The assigned inputs' offsets to commit (at least one when any is assigned). Raises
        ``KafkaException`` on failure."""
        positions = resume_positions(consumer.position(assigned), self._starts)
        known = [tp for tp in positions if tp.offset >= 0]
        if known or not positions:
            return known
        tp = positions[0]
        tp.offset = self._starts[(tp.topic, tp.partition)] = self._low(consumer, tp)
        return [tp]

    def _low(self, consumer: Consumer, tp: TopicPartition) -> int:
        where = TopicPartition(tp.topic, tp.partition)
        low, _ = consumer.get_watermark_offsets(where, cached=True)
        if low < 0:
            low, _ = consumer.get_watermark_offsets(where, timeout=self.timeout_s, cached=False)
        return int(low)


def resume_positions(
    positions: list[TopicPartition], starts: Mapping[tuple[str, int], int]
) -> list[TopicPartition]:
    """Each input's consumer position or, when it has none, where it resumed (negative: not
    known yet)."""
    return [
        tp
        if tp.offset >= 0
        else TopicPartition(
            tp.topic, tp.partition, starts.get((tp.topic, tp.partition), OFFSET_INVALID)
        )
        for tp in positions
    ]


def write_changelogs(
    producer: Producer, stores: list[Table], positions: list[TopicPartition]
) -> None:
    """Each owned table's changed keys once (tombstone if deleted), with the inputs they reflect."""
    by_partition: dict[int, dict[str, int]] = {}
    for tp in positions:
        by_partition.setdefault(tp.partition, {})[tp.topic] = tp.offset
    for store in stores:
        if not store.undo:
            continue
        headers: Headers = [(OFFSETS_HEADER, encode_offsets(by_partition.get(store.partition, {})))]
        for key, value in store.dirty():
            try:
                producer.produce(store.spec.topic, value, key, store.partition, headers=headers)
            except BufferError:  # librdkafka's queue is full: let it drain, then once more
                producer.poll(0.5)
                producer.produce(store.spec.topic, value, key, store.partition, headers=headers)


def committed_offsets(
    consumer: Consumer, partitions: list[TopicPartition], timeout_s: float
) -> list[TopicPartition]:
    """The group's committed offsets. The broker answers only once an earlier owner's pending
    transactional offsets are resolved (KIP-447), so state read afterwards is complete."""
    query = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
    try:
        committed = consumer.committed(query, timeout=timeout_s)
    except KafkaException as exc:
        raise translate(exc, "committed offsets") from exc
    for tp in committed:
        if tp.error is not None:
            raise BrokerFailure(
                f"committed offset of {tp.topic}[{tp.partition}]: {tp.error}",
                code="COMMITTED",
                kind=ErrorKind.RETRIABLE,
            )
    return committed


def start_offsets(
    committed: list[TopicPartition], reflected: dict[int, dict[str, int]]
) -> list[TopicPartition]:
    """Where each input resumes: its committed offset, or later if the restored changelog
    already reflects later inputs (offsets expired or reset): never apply an input twice."""
    starts = []
    for tp in committed:
        seen = reflected.get(tp.partition, {}).get(tp.topic, OFFSET_INVALID)
        starts.append(TopicPartition(tp.topic, tp.partition, max(tp.offset, seen)))
    return starts
