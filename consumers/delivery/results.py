"""Step three of a delivery: record what the destinations answered (DESIGN §4, step 5).

:class:`Recorder` writes each answer in the open transaction: ``delivered`` (with the ledger
records an adapter returns, which must commit with it, and what waits for that commit, such as
the ``wake_session`` wake), ``pending`` after the §8 backoff, or ``dead_letter`` (also copied to
``dead-letter`` with its categorical reason). An answer to a claim this member no longer holds
(revoked, rebuilt, or a later attempt) is dropped: the new owner sends again, at least once.
A retry of a watcher cancelled meanwhile is ``cancelled`` at once.

Leaves out claiming (``claims``) and calling destinations (``sends``).
"""

from __future__ import annotations

from datetime import datetime

from consumers.delivery.adapters import OutboundRecord, SendResult
from consumers.delivery.metrics import DeliveryMetrics
from consumers.delivery.sends import Claim
from consumers.delivery.states import DeliveryStates
from pipeline.records.delivery_state import DeliveryRecord
from pipeline.rules.dispatch import cancel, fail, succeed
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import DeliveryStatus, ErrorCode
from pipeline.runtime.processing import ProcessContext
from pipeline.runtime.transactions import TransactionScope
from pipeline.runtime.views import LifecycleIndex

__all__ = ["Recorder"]


class Recorder:
    """Records answers; collects what may only be written once their transaction commits."""

    def __init__(
        self,
        tx: TransactionScope,
        states: DeliveryStates,
        lifecycle: LifecycleIndex,
        metrics: DeliveryMetrics,
        *,
        outbox_topic: str,
        dead_letter_topic: str,
    ) -> None:
        self._tx = tx
        self._states = states
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._outbox_topic = outbox_topic
        self._dlq_topic = dead_letter_topic
        self.after_commit: list[OutboundRecord] = []

    def record(self, claim: Claim, result: SendResult, now: datetime) -> None:
        self._metrics.deliveries.labels(result.label, claim.adapter).inc()
        if result.repeat_risk:
            self._metrics.repeat_risk.labels(claim.adapter).inc()
        found = self._states.current(claim.key, claim.partition)
        if found is None or found[0] is not claim.store:
            return  # revoked or rebuilt since the claim: the new owner sends it again
        store, record = found
        state = record.state
        if state.status is not DeliveryStatus.DISPATCHING or state.attempt != claim.attempt:
            return
        entry = claim.entry
        ctx = self._tx.context(claim.partition)
        if result.ok:
            record = record.moved(succeed(state, now))
            for out in result.records:
                ctx.produce(out.topic, out.key, out.value)
            self.after_commit.extend(result.after_commit)
            since = entry.evidence_observed_at or entry.created_at
            self._metrics.end_to_end.observe(max(0.0, (now - since).total_seconds()))
        else:
            assert result.error is not None
            moved = fail(
                state, result.error, now, policy=entry.retry, retry_after=result.retry_after
            )
            record = record.moved(moved)
            if moved.status is DeliveryStatus.DEAD_LETTER:
                self._dead_letter(ctx, record, entry, result.error)
            else:
                self._metrics.retries.labels(result.error.value).inc()
                if self._lifecycle.dropping(record, entry.created_at) is not None:
                    record = record.moved(cancel(moved, now))
                    self._metrics.cancellations.inc()
        self._states.write(store, record)
        self._states.schedule(record, claim.partition, store)

    def _dead_letter(
        self, ctx: ProcessContext, record: DeliveryRecord, entry: OutboxEntry, error: ErrorCode
    ) -> None:
        topics = (self._dlq_topic, self._outbox_topic)
        self._states.dead_letter(ctx, topics, record, entry, error.value)
        self._metrics.dead_letters.labels(error.value).inc()
