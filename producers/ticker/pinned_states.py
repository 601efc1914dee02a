"""The pinned evaluators' state inside ``ticker-state``: fed by events, read by the tools.

Owns :class:`PinnedStates`: the ticker's decoder and processor for ``events`` (only a pinned
evaluator's event types decoded), keeping the latest state per ``(event type, tenant, id)`` in
the event partition's ``ticker-state``, in the transaction with the event's offset, and the
:class:`StateLookup` the evaluators read. Leaves out the tools (``tools.pinned``).
"""

from __future__ import annotations

from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import AvroCodec
from pipeline.records.event import EVENT, event_tenant, payload_object
from pipeline.records.ticker_state import PinnedState, decode_ticker_state, encode_pinned, state_key
from pipeline.rules.errors import SerdeError, UnknownSchemaError
from pipeline.runtime.app import InputRecord, ProcessContext
from pipeline.runtime.processing import Message
from pipeline.runtime.tables import Table
from producers.ticker.tools.pinned import PINNED, state_from_event
from producers.ticker.views import STATE, TickerViews

__all__ = ["PinnedStates"]


class PinnedStates:
    """Latest run and session states in this member's ``ticker-state`` partitions.

    Every other event is not the ticker's to judge (the evaluator dead-letters what does not
    decode). The tenant is the one the event's record carries, never its payload's; an older
    observation never replaces a newer one, and a restart restores the table.
    """

    def __init__(
        self, codec: AvroCodec, events_topic: str, partitions: int, views: TickerViews
    ) -> None:
        self._codec = codec
        self._events = events_topic
        self._partitions = partitions
        self._views = views

    def decode(self, msg: Message) -> PinnedState | None:
        """The state an ``events`` record reports, or None (``watchers`` records included)."""
        raw = msg.value()
        if msg.topic() != self._events or raw is None:
            return None
        try:
            record_type, value = self._codec.decode(raw)
        except UnknownSchemaError:
            raise  # a newer writer: the runtime pauses the partition until this build is newer
        except SerdeError:
            return None
        if record_type != EVENT or value.get("event_type") not in PINNED:
            return None
        try:
            payload = payload_object(value["payload"])
            tenant_id = event_tenant(value)  # the publisher's, set by its edge
        except SerdeError:
            return None
        return state_from_event(
            value["event_type"],
            tenant_id,
            value["source_id"],
            value["event_id"],
            value["observed_at"],
            payload,
        )

    def process(self, batch: list[InputRecord], ctx: ProcessContext) -> None:
        """Keep the newest state per key, in the open transaction."""
        table = ctx.table(STATE)
        for record in batch:
            state = record.value
            if not isinstance(state, PinnedState):
                continue
            if partition_for(state.source_id, self._partitions) != ctx.partition:
                continue  # a foreign producer's placement: the evaluator re-routes it here
            if state.newer_than(self._stored(table, state.key)):
                table.set(state.key, encode_pinned(self._codec, state))

    def latest(self, event_type: str, tenant_id: str, subject_id: str) -> PinnedState | None:
        """The ``StateLookup`` the pinned evaluators read: this member's partition of it."""
        spec = PINNED.get(event_type)
        if spec is None:
            return None
        partition = partition_for(spec.source_prefix + subject_id, self._partitions)
        table = self._views.state.get(partition)
        if table is None:
            return None
        state = self._stored(table, state_key(event_type, tenant_id, subject_id))
        return state if state is not None and state.tenant_id == tenant_id else None

    def _stored(self, table: Table, key: str) -> PinnedState | None:
        raw = table.get(key)
        if raw is None:
            return None
        try:
            found = decode_ticker_state(self._codec, raw)
        except SerdeError:
            return None  # unreadable state is no state: the evaluator answers unavailable
        return found if isinstance(found, PinnedState) else None
