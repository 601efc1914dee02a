"""Delivery's input: ``outbox`` entries and ``redeliveries`` requests, decoded and taken in.

Owns :class:`Intake`: a new entry becomes ``pending`` (a known key never starts over); a
``redeliver`` for a key this member holds ``dead_letter`` or ``suppressed`` makes it ``pending``
again, due now; any other request is ignored and counted; a record keyed by anything but its
delivery key is dead-lettered. Leaves out what falls due (``loop``, ``claims``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from pydantic import ValidationError

from consumers.delivery.due import DueKind
from consumers.delivery.metrics import DeliveryMetrics
from consumers.delivery.states import STATE, DeliveryStates
from pipeline.clock import Clock
from pipeline.kafka.serde import AvroCodec
from pipeline.records.delivery_state import first_record
from pipeline.records.outbox_entry import decode_outbox_entry
from pipeline.records.redelivery import decode_redelivery
from pipeline.rules.commands.model import Redelivery
from pipeline.rules.dispatch import is_redeliverable, redeliver
from pipeline.rules.errors import SerdeError
from pipeline.rules.outbox import OutboxEntry
from pipeline.runtime.processing import InputRecord, Message, ProcessContext
from pipeline.runtime.tables import Table
from pipeline.runtime.views import KeyView

__all__ = ["Intake"]

log = logging.getLogger(__name__)


class Intake:
    """Decodes and takes in the delivery stage's input records (in the open transaction)."""

    def __init__(
        self,
        redeliveries_topic: str,
        codec: AvroCodec,
        keys: KeyView,
        states: DeliveryStates,
        clock: Clock,
        metrics: DeliveryMetrics,
    ) -> None:
        self._redeliveries_topic = redeliveries_topic
        self._codec = codec
        self._keys = keys
        self._states = states
        self._clock = clock
        self._metrics = metrics

    def decode(self, msg: Message) -> OutboxEntry | Redelivery | None:
        """An ``outbox`` entry (None: a tombstone) or a ``redeliveries`` request; anything
        else raises ``SerdeError`` and is dead-lettered."""
        value = msg.value()
        if msg.topic() == self._redeliveries_topic:
            return self._redelivery(msg.key(), value)
        if value is None:
            return None  # a tombstone (a purge): nothing to deliver
        try:
            entry = decode_outbox_entry(self._codec, self._keys.ring, value)
        except (ValidationError, KeyError, TypeError, ValueError) as exc:
            raise SerdeError(f"not an outbox entry: {exc}") from exc
        if msg.key() != entry.delivery_key.encode():
            # The evaluator keys each entry by its delivery key; another key is a foreign or
            # forged record (it would dodge the key's dedupe and its partition's claims).
            raise SerdeError("the record key is not the entry's delivery key")
        return entry

    def _redelivery(self, key: bytes | None, value: bytes | None) -> Redelivery:
        """A ``redeliveries`` record, keyed by its delivery key as the command processor writes
        it; anything else (no value, another key) raises and is dead-lettered."""
        if value is None:
            raise SerdeError("a redelivery request has no value")
        request = decode_redelivery(self._codec, value)
        if key != request.delivery_key.encode():
            raise SerdeError("the record key is not the request's delivery key")
        return request

    def process(self, batch: list[InputRecord], ctx: ProcessContext) -> None:
        """New entries become ``pending``; a key already known never starts over. (An entry
        that did not open at decode time is opened again when it falls due, with the keys
        caught up; if it still does not, it is cancelled.)"""
        states = ctx.table(STATE)
        now = self._clock.now()
        self._keys.refresh()
        for record in batch:
            entry = record.value
            if entry is None:
                continue
            if isinstance(entry, Redelivery):
                self._redeliver(entry, ctx.partition, states, now)
                continue
            assert isinstance(entry, OutboxEntry)
            key = entry.delivery_key  # the record's key too (checked at decode)
            if key in states:
                continue
            first = first_record(entry, record.offset, now)
            self._states.write(states, first)
            self._states.remember(key, ctx.partition, entry)
            self._states.queue.schedule(key, ctx.partition, DueKind.ATTEMPT, first.state.due_at)

    def _redeliver(self, request: Redelivery, partition: int, states: Table, now: datetime) -> None:
        """A ``redeliver`` request: a dead-lettered or suppressed key of the same subject is
        ``pending`` again, due now, with a fresh attempt count; anything else is ignored."""
        key = request.delivery_key
        raw = states.get(key)
        record = None if raw is None else self._states.record(key, raw)
        if (
            record is None
            or (record.tenant_id, record.user_id) != (request.tenant_id, request.user_id)
            or not is_redeliverable(record.state)
        ):
            state = "absent" if record is None else record.state.status.value
            log.warning("redeliver %s (request %s) ignored: %s", key, request.request_id, state)
            self._metrics.redeliveries.labels("ignored").inc()
            return
        again = record.moved(redeliver(record.state, now))
        self._states.write(states, again)
        self._states.queue.schedule(key, partition, DueKind.ATTEMPT, again.state.due_at)
        self._metrics.redeliveries.labels("applied").inc()
        log.info("redeliver %s (request %s): pending again", key, request.request_id)
