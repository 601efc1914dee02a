"""Step three of a delivery: record what the destinations answered (DESIGN §4, step 5).

Owns :class:`Recorder`: ``delivered`` (with its ledger records), ``pending`` after the backoff or
``dead_letter`` (copied to ``dead-letter``); an answer is held until its write commits, and
recorded only on its own claim. Leaves out claiming (``claims``) and calling destinations
(``sends``).
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
from pipeline.runtime.tables import Table
from pipeline.runtime.transactions import TransactionScope
from pipeline.runtime.views import LifecycleIndex

__all__ = ["Recorder"]

# Answers kept for partitions away in a rebalance, at most (they may come back to this member).
_HELD_AWAY = 4096


class Recorder:
    """Records answers, holding each until its write commits; collects what may only be
    written once their transaction commits.

    A transaction rolled back or lost in a resync puts the claim's ``dispatching`` record back, and
    the held answer is recorded on it again instead of the entry being sent again. An answer is
    recorded only on its own claim (key, attempt, redelivery count, claim time, outbox entry); one
    whose claim this member no longer holds is dropped and the owner sends again, at least once. A
    retry of a watcher cancelled meanwhile is ``cancelled`` at once.
    """

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
        self._held: dict[str, tuple[Claim, SendResult]] = {}

    def hold(self, answers: list[tuple[Claim, SendResult]]) -> None:
        """Answers that came back (counted once, here), held until recorded and committed."""
        for claim, result in answers:
            self._metrics.deliveries.labels(result.label, claim.adapter).inc()
            if result.repeat_risk:
                self._metrics.repeat_risk.labels(claim.adapter).inc()
            self._held[claim.key] = (claim, result)

    def holds(self, record: DeliveryRecord) -> bool:
        """Whether ``record`` is a claim whose answer is held (to be recorded, not resent)."""
        held = self._held.get(record.key)
        return held is not None and held[0].is_claim_of(record)

    def record_held(self, now: datetime) -> int:
        """Record every held answer whose claim is still its record's state, in the open
        transaction (begun if need be); returns how many. An answer whose key has moved on in
        a committed write is let go; one written in the open transaction stays held until that
        commits, and one whose partition is away (a rebalance) until it is back, if few are."""
        recorded = 0
        for key, (claim, result) in list(self._held.items()):
            found = self._states.current(key, claim.partition)
            if found is not None and claim.is_claim_of(found[1]):
                self._tx.begin()
                self._record(claim, result, found[0], found[1], now)
                recorded += 1
            elif self._states.store(claim.partition) is None:
                if len(self._held) > _HELD_AWAY:
                    del self._held[key]
            elif not self._states.dirty(key, claim.partition):
                del self._held[key]
        return recorded

    def _record(
        self, claim: Claim, result: SendResult, store: Table, record: DeliveryRecord, now: datetime
    ) -> None:
        state = record.state
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
