"""Step one of a delivery: fire the due timers — purge settled entries, decide due ones, claim
those that may go (DESIGN §4, steps 1–3).

Owns :class:`Claimer`: in the open transaction a purge tombstones ``delivery-state`` and
``outbox``; a due entry is planned, charged with its batch in one Redis round trip and claimed
(``dispatching``, attempt + 1), sent only once that transaction committed. Leaves out sending
(``sends``), recording answers (``results``) and the rules.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime

from consumers.delivery.due import Due, DueKind
from consumers.delivery.metrics import DeliveryMetrics
from consumers.delivery.planner import Decision, Pending, Planner
from consumers.delivery.sends import Claim
from consumers.delivery.states import DeliveryStates
from pipeline.records.delivery_state import DeliveryRecord
from pipeline.rules.dispatch import DispatchAction, cancel, give_up, restore
from pipeline.rules.errors import InfrastructureError
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import DeliveryStatus, ErrorCode
from pipeline.runtime.tables import Table
from pipeline.runtime.transactions import TransactionScope

__all__ = ["Claimer"]

log = logging.getLogger(__name__)


class Claimer:
    """Purges, decides and claims due entries; the claims go out once committed."""

    def __init__(
        self,
        tx: TransactionScope,
        states: DeliveryStates,
        planner: Planner,
        metrics: DeliveryMetrics,
        outbox_topic: str,
        *,
        in_flight: Callable[[DeliveryRecord], bool],
        adapter_of: Callable[[OutboxEntry], str],
        dead_letter_topic: str | None = None,
    ) -> None:
        self._tx = tx
        self._states = states
        self._planner = planner
        self._metrics = metrics
        self._outbox_topic = outbox_topic
        self._in_flight = in_flight
        self._adapter_of = adapter_of
        self._dead_letter_topic = dead_letter_topic

    def fire(self, dues: Iterable[Due], now: datetime) -> list[Claim]:
        """Purge, decide and persist ``dues`` in the open transaction; returns the claims.

        An entry whose own data makes deciding it fail is dead-lettered (:meth:`_give_up`);
        the others go on."""
        waiting: list[tuple[Pending, int, Table]] = []
        for due in dues:
            found = self._states.current(due.key, due.partition)
            if found is None:
                continue
            store, record = found
            try:
                if due.kind is DueKind.PURGE:
                    self._purge(record, due.partition, store)
                    continue
                pending = self._prepare(record, due.partition, store, now)
            except InfrastructureError:  # not the entry's: decided again later
                raise
            except Exception as exc:
                self._give_up(record, due.partition, store, exc, now)
                continue
            if pending is not None:
                waiting.append((pending, due.partition, store))
        if not waiting:
            return []
        checks = self._planner.charge([pending for pending, _, _ in waiting])
        claims: list[Claim] = []
        for (pending, partition, store), check in zip(waiting, checks, strict=True):
            try:
                decision = self._planner.complete(pending, check)
                claim = self._apply(pending.record, pending.entry, decision, partition, store)
            except InfrastructureError:  # not the entry's: decided again later
                raise
            except Exception as exc:
                self._give_up(pending.record, partition, store, exc, now)
                continue
            if claim is not None:
                claims.append(claim)
        return claims

    def _give_up(
        self, record: DeliveryRecord, partition: int, store: Table, exc: Exception, now: datetime
    ) -> None:
        """Dead-letter an entry that cannot be decided: ``dead_letter`` (``internal``) in
        ``delivery-state``, its outbox value on ``dead-letter`` with the reason, a metric and a
        log line — never the worker's exit, never a retry loop."""
        state = (
            restore(record.state)
            if record.state.status is DeliveryStatus.DISPATCHING
            else record.state
        )
        reason = f"internal: {type(exc).__name__}: {str(exc)[:500]}"
        log.error("delivery %s cannot be decided, dead-lettered: %s", record.key, reason)
        if state.status is not DeliveryStatus.PENDING:
            return  # settled already: nothing is retried, nothing to record
        record = record.moved(give_up(state, ErrorCode.INTERNAL, now), reason)
        self._states.write(store, record)
        self._states.schedule(record, partition, store)
        entry = self._states.entry(record.key, partition)
        if entry is not None and self._dead_letter_topic is not None:
            topics = (self._dead_letter_topic, self._outbox_topic)
            self._states.dead_letter(self._tx.context(partition), topics, record, entry, reason)
        self._metrics.dead_letters.labels(ErrorCode.INTERNAL.value).inc()

    def _prepare(
        self, record: DeliveryRecord, partition: int, store: Table, now: datetime
    ) -> Pending | None:
        """Decide what needs no budget; return what waits for its charge."""
        key = record.key
        if record.state.status is DeliveryStatus.DISPATCHING:
            if self._in_flight(record):  # sent, or answered and recorded soon: not again
                return None
            record = record.moved(restore(record.state), record.detail)
        state = record.state
        if state.status is not DeliveryStatus.PENDING:
            self._states.schedule(record, partition, store)
            return None
        if state.due_at > now:
            self._states.queue.schedule(key, partition, DueKind.ATTEMPT, state.due_at)
            return None
        entry = self._states.entry(key, partition)
        if entry is None or entry.erased:  # purged, or its subject erased: nothing to send
            self._states.write(store, record.moved(cancel(state, now)))
            self._metrics.cancellations.inc()
            self._states.queue.schedule(key, partition, DueKind.PURGE, now)
            return None
        found = self._planner.prepare(record, entry, now)
        if isinstance(found, Pending):
            return found
        self._apply(record, entry, found, partition, store)
        return None

    def _apply(
        self,
        record: DeliveryRecord,
        entry: OutboxEntry,
        decision: Decision,
        partition: int,
        store: Table,
    ) -> Claim | None:
        """Persist a decision (in the open transaction); a dispatch becomes a claim."""
        plan = decision.plan
        record = record.moved(plan.state, decision.detail)
        self._states.write(store, record)
        if plan.action is DispatchAction.DISPATCH:
            adapter = self._adapter_of(entry)
            state = plan.state
            return Claim(
                record.key,
                partition,
                state.attempt,
                entry,
                adapter,
                state.updated_at,
                state.redeliveries,
                record.outbox_offset,
            )
        reason = "" if plan.reason is None else plan.reason.value
        if plan.action is DispatchAction.DEFER:
            self._metrics.deferrals.labels(reason).inc()
        elif plan.action is DispatchAction.SUPPRESS:
            self._metrics.suppressions.labels(reason).inc()
        elif plan.action is DispatchAction.CANCEL:
            self._metrics.cancellations.inc()
        self._states.schedule(record, partition, store)
        return None

    def _purge(self, record: DeliveryRecord, partition: int, store: Table) -> None:
        """Tombstones on ``delivery-state`` and ``outbox``. Unsettled work is never purged."""
        if record.state.status in (DeliveryStatus.PENDING, DeliveryStatus.DISPATCHING):
            return
        self._states.delete(store, record.key)
        self._tx.context(partition).produce(self._outbox_topic, record.key, None, partition)
        self._metrics.purges.inc()
