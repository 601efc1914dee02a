"""Calling destinations off the poll thread: persisted claims in, categorical answers out.

Owns :class:`Claim` and :class:`SendPool`: a thread pool calling each claim's adapter (or the
executor of a fired ``prompt`` or ``run``), and the answers collected in batches, so a turn's
fixed costs are paid once per batch. Leaves out what an answer means
(``pipeline.rules.dispatch``) and the destinations (``adapters``).
"""

from __future__ import annotations

import logging
import queue
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from consumers.delivery.adapters import AdapterRegistry, SendResult
from consumers.delivery.adapters.verbs import EXECUTED_VERBS
from pipeline.records.delivery_state import DeliveryRecord
from pipeline.rules.outbox import OutboxEntry, as_sent
from pipeline.rules.outcomes import DeliveryStatus, ErrorCode

__all__ = ["Claim", "Executor", "SendPool"]

log = logging.getLogger(__name__)


class Executor(Protocol):
    """Runs a fired ``prompt`` or ``run`` entry and answers like an adapter (thread-safe)."""

    def execute(self, entry: OutboxEntry) -> SendResult: ...


@dataclass(frozen=True, slots=True, eq=False)
class Claim:
    """A persisted claim whose destination is being called; the destination reads the entry as
    sent at ``claimed_at`` (``pipeline.rules.outbox.as_sent``: a fire claimed late is late).

    Its identity is the ``dispatching`` record it persisted (:meth:`is_claim_of`): the key, the
    attempt, the redelivery count, the claim's time and the outbox entry's offset. An answer is
    recorded only on that very record, whichever store holds it now (a resync restores the
    tables into new stores)."""

    key: str
    partition: int
    attempt: int
    entry: OutboxEntry
    adapter: str  # the adapter kind, for metrics
    claimed_at: datetime  # the claim's time, as delivery-state records it
    redeliveries: int  # the entry's redelivery count when claimed (a redelivery starts over)
    outbox_offset: int  # the outbox entry's offset the claimed record refers to

    def is_claim_of(self, record: DeliveryRecord) -> bool:
        """Whether ``record`` is this claim, unmoved since: ``dispatching`` with the same
        attempt, redelivery count, claim time and outbox entry."""
        state = record.state
        return (
            state.status is DeliveryStatus.DISPATCHING
            and state.delivery_key == self.key
            and state.attempt == self.attempt
            and state.redeliveries == self.redeliveries
            and state.updated_at == self.claimed_at
            and record.outbox_offset == self.outbox_offset
        )


class SendPool:
    """Claims in flight and their answers. Used from the poll thread only, except the pool's
    completion callbacks, which only put on a thread-safe queue.

    A batch of answers is ready when it is big, when every send in flight has answered, when its
    oldest answer has waited ``linger_s``, or when the worker is stopping. A fired ``prompt`` or
    ``run`` without an executor is ``rejected``, never sent as a message.
    """

    def __init__(
        self,
        adapters: AdapterRegistry,
        senders: int,
        *,
        batch: int,
        linger_s: float,
        executor: Executor | None = None,
    ) -> None:
        self._adapters = adapters
        self._executor = executor
        self._senders = senders
        self._batch = batch
        self._linger_s = linger_s
        self._pool: ThreadPoolExecutor | None = None
        self._done: queue.SimpleQueue[tuple[Claim, Future[SendResult]]] = queue.SimpleQueue()
        self._arrived: list[tuple[Claim, Future[SendResult]]] = []
        self._arrived_at = 0.0
        self.in_flight: dict[str, Claim] = {}

    def start(self) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._senders, thread_name_prefix="delivery-send")

    def close(self) -> None:
        """Stop calling destinations; answers still on their way are dropped (resent later)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def submit(self, claim: Claim) -> None:
        if self._pool is None:
            raise RuntimeError("the send pool is not started")
        self.in_flight[claim.key] = claim
        future = self._pool.submit(self._send, as_sent(claim.entry, claim.claimed_at))
        future.add_done_callback(lambda done: self._done.put((claim, done)))

    def kind(self, entry: OutboxEntry) -> str:
        """The ``adapter`` label of an entry's metrics: the adapter kind, or the executed verb."""
        if entry.verb in EXECUTED_VERBS:
            return entry.verb
        adapter = self._adapters.resolve(entry.target)
        return "unknown" if adapter is None else adapter.kind.value

    def _send(self, entry: OutboxEntry) -> SendResult:
        if entry.verb not in EXECUTED_VERBS:
            return self._adapters.send(entry)
        if self._executor is None:
            log.error("%s entry %s: no executor in this process", entry.verb, entry.delivery_key)
            return SendResult.failed(ErrorCode.REJECTED)
        return self._executor.execute(entry)

    def claimed(self, record: DeliveryRecord) -> bool:
        """Whether ``record`` is a claim whose send is in flight."""
        claim = self.in_flight.get(record.key)
        return claim is not None and claim.is_claim_of(record)

    def collect(self) -> None:
        """Move the answers that arrived off the queue, noting when the oldest came."""
        while True:
            try:
                answer = self._done.get_nowait()
            except queue.Empty:
                return
            if not self._arrived:
                self._arrived_at = time.monotonic()
            self._arrived.append(answer)

    def ready(self, stopping: bool = False) -> bool:
        """Whether the collected answers make a batch worth recording now."""
        if not self._arrived:
            return False
        return (
            len(self._arrived) >= min(self._batch, len(self.in_flight))
            or stopping
            or time.monotonic() - self._arrived_at >= self._linger_s
        )

    def take(self) -> list[tuple[Claim, SendResult]]:
        """The collected answers, their claims no longer in flight."""
        arrived, self._arrived = self._arrived, []
        answers: list[tuple[Claim, SendResult]] = []
        for claim, future in arrived:
            if self.in_flight.get(claim.key) is claim:
                del self.in_flight[claim.key]
            try:
                result = future.result()
            except Exception as exc:  # the registry already turns adapter bugs into codes
                log.error("send of %s failed: %s", claim.key, type(exc).__name__)
                result = SendResult.failed(ErrorCode.INTERNAL)
            answers.append((claim, result))
        return answers
