"""The stream runtime as the delivery consumer needs it: transactions opened by timers, not only
by input records.

:class:`~pipeline.kafka.runtime.StreamApp` opens a transaction when input arrives. Delivery also
writes when nothing arrives — a retry falls due, a claim must be persisted before its
destination is called — so :class:`DeliveryApp` adds :meth:`~DeliveryApp.begin` (open the
transaction now), :meth:`~DeliveryApp.catch_up` (bring ``grants`` and ``lifecycle`` to their
end before deciding), :meth:`~DeliveryApp.context` (tables and produce for one partition),
:meth:`~DeliveryApp.stores` (the stores held now, to notice a restore) and
:attr:`~DeliveryApp.aborts` (to notice a rollback).

It also keeps KIP-447 fencing in every transaction: librdkafka reports no position for an input
partition that has delivered nothing since assignment (a restart with nothing new in the outbox,
the usual case for a retry), and a transaction whose offsets are all unknown would carry no
group metadata. Then the committed offsets are sent again, so every claim carries the group's
generation and a zombie's claim cannot commit (DESIGN.md §4).

These hooks reach into the runtime's internals; they belong in ``StreamApp`` itself, and move
there when it grows them. Leaves out what is processed (``consumers.delivery``).
"""

from __future__ import annotations

from confluent_kafka import KafkaException, TopicPartition

from pipeline.kafka.checkpoint import committed_offsets
from pipeline.kafka.runtime import ProcessContext, StreamApp
from pipeline.kafka.tables import Table

__all__ = ["DeliveryApp"]

_TIMEOUT_S = 30.0


class DeliveryApp(StreamApp):
    """A :class:`StreamApp` whose transactions may also be opened by timers."""

    aborts: int = 0  # transactions rolled back so far: in-memory views must be rebuilt
    _fence_cache: tuple[object, list[TopicPartition]] | None = None

    def begin(self) -> None:
        """Open the transaction if none is open (claims and results ride in it)."""
        self._checkpoint.begin(self._require_producer())

    @property
    def in_transaction(self) -> bool:
        return bool(self._checkpoint.open)

    def catch_up(self) -> None:
        """Read the global and external tables up to their current end."""
        self._state.catch_up()

    def context(self, partition: int) -> ProcessContext:
        """Tables and produce for one partition, inside the open transaction."""
        producer = self._require_producer()
        return ProcessContext(
            partition,
            producer.produce,
            producer.poll,
            self._state.table,
            self._placement.partition_of,
        )

    def global_table(self, table_name: str) -> Table:
        """A whole-topic table (``grants``, ``lifecycle``), loaded by :meth:`start`."""
        return self._state.table(table_name, -1)

    def stores(self, table_name: str) -> dict[int, Table]:
        """The per-partition stores of one table held now, by partition."""
        return {t.partition: t for t in self._state.stores() if t.spec.name == table_name}

    def commit(self, rewind: bool = True) -> bool:
        if self._checkpoint.open and self._assigned:
            try:
                self._fence_offsets()
            except KafkaException as exc:
                self._recover(exc, "commit", rewind)
                self.aborts += 1
                return False
        ok = super().commit(rewind)
        if not ok:
            self.aborts += 1
        return ok

    def _abort(self, restore: bool = True) -> None:
        self.aborts += 1
        super()._abort(restore)

    def _fence_offsets(self) -> None:
        """Send the committed offsets when no input position is known (see module doc)."""
        consumer = self._require_consumer()
        if any(tp.offset >= 0 for tp in consumer.position(self._assigned)):
            return  # the runtime sends them, with the group metadata
        cached = self._fence_cache
        if cached is None or cached[0] is not self._assigned:
            known = committed_offsets(consumer, self._assigned, _TIMEOUT_S)
            cached = (self._assigned, [tp for tp in known if tp.offset >= 0])
            self._fence_cache = cached
        if not cached[1]:
            return  # nothing ever consumed here: there is nothing to claim either
        if self._group_metadata is None:
            self._group_metadata = consumer.consumer_group_metadata()
        self._require_producer().send_offsets_to_transaction(
            cached[1], self._group_metadata, _TIMEOUT_S
        )
