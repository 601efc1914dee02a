"""The delivery worker's view of its tables: ``delivery-state`` stores, the due-time queue kept in
step with them, and the outbox entries they refer to.

Owns :class:`DeliveryStates`: the queue rebuilt for every partition restored, revoked or rolled
back, each record's timer, writes, and outbox entries decoded once (cached by the very bytes
object, so a rollback is never served a stale record). Leaves out every decision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from pydantic import ValidationError

from consumers.delivery.due import DueKind, DueQueue
from pipeline.kafka.serde import AvroCodec
from pipeline.kafka.topics import dead_letter_headers
from pipeline.records.delivery_state import DeliveryRecord, decode_record, encode_record
from pipeline.records.outbox_entry import decode_outbox_entry, encode_outbox_entry
from pipeline.records.sealing import Sealer
from pipeline.rules.dispatch import purge_due
from pipeline.rules.errors import SerdeError
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import DeliveryStatus
from pipeline.runtime.processing import ProcessContext
from pipeline.runtime.state import TaskState
from pipeline.runtime.tables import Table
from pipeline.runtime.transactions import TransactionScope
from pipeline.runtime.views import DecodedCache

__all__ = ["OUTBOX", "STATE", "DeliveryStates"]

log = logging.getLogger(__name__)

STATE = "delivery-state"
OUTBOX = "outbox"

_UNSETTLED = (DeliveryStatus.PENDING, DeliveryStatus.DISPATCHING)


class DeliveryStates:
    """The stores, the queue and the entries of one worker."""

    def __init__(
        self, tables: TaskState, tx: TransactionScope, codec: AvroCodec, sealer: Sealer
    ) -> None:
        self._tables = tables
        self._tx = tx
        self._codec = codec
        self._sealer = sealer
        self.queue = DueQueue()
        self._known: dict[int, Table] = {}  # the stores the queue reflects
        self._seen_aborts = 0
        self._decoded: DecodedCache[DeliveryRecord] = DecodedCache()
        self._entries: dict[str, tuple[int, OutboxEntry]] = {}

    # -- stores and records ----------------------------------------------------------------

    def store(self, partition: int) -> Table | None:
        return self._known.get(partition)

    def stores(self) -> Iterator[tuple[int, Table]]:
        yield from self._known.items()

    def record(self, key: str, raw: bytes) -> DeliveryRecord | None:
        """The record ``raw`` holds (None, logged, when unreadable)."""
        try:
            return self._decoded.get(key, raw, self._decode)
        except SerdeError as exc:
            log.error("delivery-state record %s is unreadable: %s", key, exc)
            return None

    def _decode(self, raw: bytes) -> DeliveryRecord:
        return decode_record(self._codec, raw)

    def current(self, key: str, partition: int) -> tuple[Table, DeliveryRecord] | None:
        """The store and record of ``key``, if this worker holds it."""
        store = self._known.get(partition)
        raw = None if store is None else store.get(key)
        if store is None or raw is None:
            return None
        record = self.record(key, raw)
        return None if record is None else (store, record)

    def write(self, store: Table, record: DeliveryRecord) -> None:
        """Set ``record`` in ``store`` (written to the changelog at the next commit)."""
        raw = encode_record(self._codec, record)
        store.set(record.key, raw)
        if record.state.status in _UNSETTLED:
            self._decoded.put(record.key, raw, record)
        else:  # settled: read again only to be purged
            self._decoded.pop(record.key)

    def delete(self, store: Table, key: str) -> None:
        store.delete(key)
        self._decoded.pop(key)
        self._entries.pop(key, None)

    def dirty(self, key: str, partition: int) -> bool:
        """Whether ``key`` was written in the open transaction."""
        store = self._known.get(partition)
        return store is not None and key in store.undo

    # -- the queue -------------------------------------------------------------------------

    def sync(self, claimed: Callable[[DeliveryRecord], bool]) -> bool:
        """Rebuild the queue for partitions restored, revoked or rolled back since last time;
        True if it did.

        ``claimed(record)`` says a ``dispatching`` record is a claim the worker sent and whose
        answer it will record (in flight, or answered and held); any other ``dispatching``
        record was interrupted."""
        stores = self._tables.stores_of(STATE)
        if self._tx.aborts != self._seen_aborts:
            self._seen_aborts = self._tx.aborts
            changed = set(stores) | set(self._known)
        else:
            changed = {p for p, s in stores.items() if self._known.get(p) is not s}
            changed |= {p for p in self._known if p not in stores}
        if not changed:
            return False
        self.queue.drop_partitions(changed)
        self._decoded.clear()  # a memory bound only: stale entries never match
        gone = changed - set(stores)
        if gone:
            self._entries = {k: v for k, v in self._entries.items() if v[0] not in gone}
        for partition in changed & set(stores):
            store = stores[partition]
            for key, raw in store.items():
                record = self.record(key, raw)
                if record is not None:
                    self.schedule(record, partition, store, claimed(record))
        self._known = dict(stores)
        return True

    def schedule(
        self, record: DeliveryRecord, partition: int, store: Table, in_flight: bool = False
    ) -> None:
        """Set the one timer of ``record``'s key from its state."""
        state = record.state
        if state.status is DeliveryStatus.PENDING:
            self.queue.schedule(record.key, partition, DueKind.ATTEMPT, state.due_at)
        elif state.status is DeliveryStatus.DISPATCHING:
            if not in_flight:  # interrupted: pending again, same attempt count, due now
                self.queue.schedule(record.key, partition, DueKind.ATTEMPT, state.due_at)
        else:
            self.queue.schedule(
                record.key, partition, DueKind.PURGE, purge_due(state, record.delivery_retention)
            )

    # -- outbox entries ----------------------------------------------------------------------

    def remember(self, key: str, partition: int, entry: OutboxEntry) -> None:
        self._entries[key] = (partition, entry)

    def entry(self, key: str, partition: int) -> OutboxEntry | None:
        """The outbox entry of ``key`` (None when the outbox no longer holds it; ``erased``
        when its key is gone — one read as erased is opened again, its key may have come)."""
        cached = self._entries.get(key)
        if cached is not None and not cached[1].erased:
            return cached[1]
        raw = self._outbox_raw(key, partition)
        if raw is None:
            return None
        try:
            entry = decode_outbox_entry(self._codec, self._sealer, raw)
        except (SerdeError, ValidationError, KeyError, TypeError, ValueError) as exc:
            log.error("outbox entry %s is unreadable: %s", key, exc)
            return None
        self._entries[key] = (partition, entry)
        return entry

    def _outbox_value(self, key: str, partition: int, entry: OutboxEntry) -> bytes:
        """The entry's bytes as the outbox holds them (for a dead letter)."""
        raw = self._outbox_raw(key, partition)
        return raw if raw is not None else encode_outbox_entry(self._codec, self._sealer, entry)

    def dead_letter(
        self,
        ctx: ProcessContext,
        topics: tuple[str, str],
        record: DeliveryRecord,
        entry: OutboxEntry,
        reason: str,
    ) -> None:
        """The entry's outbox value on ``dead-letter`` (``topics``: that topic and the outbox),
        with the headers that say why and where from (in the open transaction)."""
        dead_letter_topic, outbox_topic = topics
        headers = dead_letter_headers(reason, outbox_topic, ctx.partition, record.outbox_offset)
        value = self._outbox_value(record.key, ctx.partition, entry)
        ctx.produce(dead_letter_topic, record.key, value, headers=[*headers])

    def _outbox_raw(self, key: str, partition: int) -> bytes | None:
        store = self._tables.stores_of(OUTBOX).get(partition)
        return None if store is None else store.get(key)
