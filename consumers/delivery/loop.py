"""The delivery consumer group: outbox entries delivered at least once, fenced, budgeted.

DESIGN.md §4 and seed 000's dispatch sequence, on the exactly-once runtime
(:class:`~consumers.delivery.app.DeliveryApp`):

- ``outbox`` is the input (``read_committed``), co-partitioned with ``delivery-state``, this
  group's own changelog table. A new entry becomes ``pending`` in ``delivery-state`` in the
  transaction that commits its outbox offset; from then on the restored table and a due-time
  queue (:class:`~consumers.delivery.due.DueQueue`) drive it, so one slow key never holds
  back a partition. The queue is rebuilt whenever the table is restored (assignment, a fenced
  producer) or rolled back (an aborted transaction); ``dispatching`` entries found there are
  ``pending`` again with the same key and attempt count.
- Due entries are decided (:class:`~consumers.delivery.planner.Planner`: lifecycle,
  authorization, quiet hours, Redis budgets), and the many that may go are claimed
  (``dispatching``, attempt + 1) in one transaction, which carries the consumer's offsets and
  group metadata, so a zombie's claim cannot commit. Only after it commits are their
  destinations called, concurrently, on a thread pool off the poll thread; the results are
  recorded in a later transaction: ``delivered`` (with any ledger records an adapter returns),
  ``pending`` after the §8 backoff, or ``dead_letter`` (also copied to ``dead-letter`` with its
  categorical reason).
- ``lifecycle`` and ``grants`` are read whole. Entries of a cancelled watcher or an erased
  subject are ``cancelled`` and purged at once (tombstones on ``outbox`` and
  ``delivery-state``; an erasure also deletes the subject's Redis budgets); other settled
  entries are purged once their delivery retention has passed.

Delivery is at least once: a crash between a send and its recorded result sends again under
the same delivery key, which every adapter passes on.

The loop and its decisions live here; the tables and the due-time queue in
``delivery_states``, the sender threads in ``delivery_sends``, the verdicts in
``delivery_decide``, cancel and erase in ``delivery_sweep``. Leaves out the rules
(``pipeline.rules.dispatch`` and friends), destinations (``consumers.delivery.adapters``) and the process
around it (``pipeline.cli.delivery_cmd``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from confluent_kafka import Message
from prometheus_client import REGISTRY, CollectorRegistry
from pydantic import ValidationError

from consumers.delivery.adapters import AdapterRegistry, OutboundRecord, SendResult
from consumers.delivery.app import DeliveryApp
from consumers.delivery.due import DueKind
from consumers.delivery.metrics import DeliveryMetrics, delivery_metrics
from consumers.delivery.planner import Decision, Pending, Planner
from consumers.delivery.sends import Claim, Executor, SendPool
from consumers.delivery.states import OUTBOX, STATE, DeliveryStates
from consumers.delivery.sweep import sweep
from pipeline.clock import Clock, SystemClock
from pipeline.kafka.serde import SchemaRegistry, default_registry
from pipeline.kafka.topics import Topic, Topology, dead_letter_headers
from pipeline.records.delivery_state import (
    DeliveryRecord,
    decode_record,
    first_record,
)
from pipeline.records.outbox_entry import decode_outbox_entry
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.dispatch import (
    BUDGET_UNAVAILABLE_RETRY,
    DispatchAction,
    cancel,
    fail,
    restore,
    succeed,
)
from pipeline.rules.errors import SerdeError
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import DeliveryStatus, ErrorCode
from pipeline.runtime.app import InputRecord, ProcessContext
from pipeline.runtime.tables import Table, TableKind, TableSpec
from pipeline.runtime.views import GrantIndex, LifecycleIndex

__all__ = ["DEFAULT_GROUP", "DeliverySettings", "DeliveryWorker"]

log = logging.getLogger(__name__)

DEFAULT_GROUP = "vigil.delivery"
LIFECYCLE = "lifecycle"
GRANTS = "grants"
_S = DeliveryStatus
# Before deciding due entries, grants and lifecycle are at most this old: a revocation or a
# cancel applies to every attempt decided from 50 ms after it reached the broker.
_DECIDE_REFRESH_S = 0.05


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    """How one delivery process runs. ``budget_defaults`` fill caps a definition leaves out."""

    topology: Topology
    instance_id: str
    group_id: str = DEFAULT_GROUP
    budget_defaults: BudgetCaps = field(
        default_factory=lambda: BudgetCaps(window=timedelta(hours=1))
    )
    max_claims: int = 500  # due entries decided per transaction
    max_in_flight: int = 256  # claimed sends not answered yet
    senders: int = 16  # threads calling destinations
    result_batch: int = 128  # answers recorded together (``SendPool.ready``)
    linger_s: float = 0.05  # the longest an answer or a due entry waits to join a batch
    unavailable_retry: timedelta = BUDGET_UNAVAILABLE_RETRY
    table_refresh_s: float = 0.5  # how often grants and lifecycle are read while idle
    drain_timeout_s: float = 30.0  # on stop: how long to wait for sends in flight
    commit_interval_ms: int = 100
    consumer_overrides: dict[str, object] = field(default_factory=dict)


@functools.lru_cache(maxsize=256)
class DeliveryWorker:
    """One member of the delivery group. No network until :meth:`start`."""

    def __init__(
        self,
        bootstrap: str,
        settings: DeliverySettings,
        adapters: AdapterRegistry,
        budgets: RedisBudgets,
        *,
        clock: Clock | None = None,
        registry: CollectorRegistry = REGISTRY,
        schemas: SchemaRegistry | None = None,
        executor: Executor | None = None,
    ) -> None:
        """``executor`` runs fired ``prompt`` and ``run`` entries (a process that has none
        rejects them)."""
        self.settings = settings
        topology = settings.topology
        self._outbox_topic = topology.name(Topic.OUTBOX)
        self._dlq_topic = topology.name(Topic.DEAD_LETTER)
        self._budgets = budgets
        self._clock: Clock = clock or SystemClock()
        self._schemas = schemas or default_registry()
        self._metrics = delivery_metrics(registry)
        self.app = DeliveryApp(
            bootstrap,
            settings.group_id,
            settings.instance_id,
            [self._outbox_topic],
            self._on_outbox,
            tables=[
                TableSpec(STATE, topology.name(Topic.DELIVERY_STATE), TableKind.OWNED),
                TableSpec(OUTBOX, self._outbox_topic, TableKind.EXTERNAL),
                TableSpec(LIFECYCLE, topology.name(Topic.LIFECYCLE), TableKind.GLOBAL),
                TableSpec(GRANTS, topology.name(Topic.GRANTS), TableKind.GLOBAL),
            ],
            decode=self._decode,
            dead_letter_topic=self._dlq_topic,
            commit_interval_ms=settings.commit_interval_ms,
            consumer_overrides=dict(settings.consumer_overrides),
            registry=registry,
        )
        self._states = DeliveryStates(self.app, self._schemas)
        self._sends = SendPool(
            adapters,
            settings.senders,
            batch=settings.result_batch,
            linger_s=settings.linger_s,
            executor=executor,
        )
        self._after_commit: list[OutboundRecord] = []
        self._planner: Planner | None = None
        self._lifecycle: LifecycleIndex | None = None
        self._grants: GrantIndex | None = None
        self._views_read = 0.0
        self._fired = 0.0
        self._started = False
        self._stopping = False

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if self._started:
            return
        self.app.start()
        self._grants = GrantIndex(self.app.global_table(GRANTS), self._schemas)
        self._lifecycle = LifecycleIndex(self.app.global_table(LIFECYCLE), self._schemas)
        self._planner = Planner(
            grants=self._grants,
            lifecycle=self._lifecycle,
            budgets=self._budgets,
            budget_defaults=self.settings.budget_defaults,
            unavailable_retry=self.settings.unavailable_retry,
        )
        self._views_read = time.monotonic()
        self._sends.start()
        self._started = True

    def run(self, stop: threading.Event) -> None:
        """Deliver until ``stop`` is set; then wait for sends in flight, record, commit, leave."""
        self.start()
        try:
            while not stop.is_set():
                self.step()
            self.drain()
        finally:
            self.close()

    def step(self) -> None:
        """One turn: read the outbox, record answers, fire due timers, then commit what was
        written — claims before their sends, and every state before a timer moves its key
        again (one commit per turn, whatever it holds)."""
        self.app.step(self._poll_timeout())
        self._states.sync(self._sends.claimed)
        self._sends.collect()
        recorded = self._sends.ready() and self._record_answers()
        self._refresh_views()
        claims: list[Claim] = []
        idle = not self._sends.in_flight
        if recorded or idle or time.monotonic() - self._fired >= self.settings.linger_s:
            claims = self._fire_due()
        if recorded or claims:
            self._commit(claims)

    def _commit(self, claims: list[Claim]) -> None:
        """Commit; only then send the claims and write what waits for the commit."""
        after, self._after_commit = self._after_commit, []
        if not self.app.commit():
            return  # rolled back: the next turn rebuilds the queue from the tables
        for claim in claims:
            self._sends.submit(claim)
            self._metrics.attempts.labels(claim.adapter).inc()
        self._metrics.in_flight.set(len(self._sends.in_flight))
        if after:
            self.app.begin()
            context = self.app.context(-1)
            for out in after:
                context.produce(out.topic, out.key, out.value)

    def drain(self) -> None:
        """Stop claiming; record what the destinations in flight answer (bounded wait)."""
        self._stopping = True
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while self._sends.in_flight and time.monotonic() < deadline:
            self.app.step(0.01)
            self._states.sync(self._sends.claimed)
            self._sends.collect()
            self._record_answers()
        self._commit([])

    def close(self) -> None:
        self._sends.close()
        self.app.close()
        self._started = False

    # -- introspection ---------------------------------------------------------------------

    @property
    def metrics(self) -> DeliveryMetrics:
        return self._metrics

    @property
    def in_flight(self) -> int:
        return len(self._sends.in_flight)

    def records(self) -> dict[str, DeliveryRecord]:
        """Every delivery-state record this member holds now (tests and introspection)."""
        out: dict[str, DeliveryRecord] = {}
        for store in self.app.stores(STATE).values():
            for key, raw in store.items():
                out[key] = decode_record(self._schemas, raw)
        return out

    def _poll_timeout(self) -> float:
        if self._sends.ready():
            return 0.0
        if self._sends.in_flight:
            return 0.005
        next_at = self._states.queue.next_at()
        if next_at is None:
            return 0.05
        wait = (next_at - self._clock.now()).total_seconds()
        return min(0.05, max(0.0, wait))

    # -- the outbox, as input ------------------------------------------------------------

    def _decode(self, msg: Message) -> OutboxEntry | None:
        value = msg.value()
        if value is None:
            return None  # a tombstone (a purge): nothing to deliver
        try:
            return decode_outbox_entry(self._schemas, value)
        except (ValidationError, KeyError, TypeError, ValueError) as exc:
            raise SerdeError(f"not an outbox entry: {exc}") from exc

    def _on_outbox(self, batch: list[InputRecord], ctx: ProcessContext) -> None:
        """New entries become ``pending``; a key already known never starts over."""
        states = ctx.table(STATE)
        now = self._clock.now()
        for record in batch:
            entry = record.value
            if entry is None:
                continue
            assert isinstance(entry, OutboxEntry)
            key = (record.key or b"").decode()
            if key != entry.delivery_key:
                log.error("outbox record keyed %r holds entry %s: skipped", key, entry.delivery_key)
                continue
            if key in states:
                continue
            first = first_record(entry, record.offset, now)
            self._states.write(states, first)
            self._states.remember(key, ctx.partition, entry)
            self._states.queue.schedule(key, ctx.partition, DueKind.ATTEMPT, first.state.due_at)

    # -- grants and lifecycle ------------------------------------------------------------

    def _refresh_views(self, within_s: float | None = None) -> None:
        """Catch ``grants`` and ``lifecycle`` up if they were last read more than ``within_s``
        (default: the idle refresh interval) ago; sweep what a new lifecycle record drops."""
        age = time.monotonic() - self._views_read
        if age < (self.settings.table_refresh_s if within_s is None else within_s):
            return
        self.app.catch_up()
        self._views_read = time.monotonic()
        assert self._grants is not None and self._lifecycle is not None
        self._grants.refresh()
        dropping = self._lifecycle.refresh()
        if dropping:
            self.app.begin()
            sweep(dropping, self._states, self._budgets, self._metrics, self._clock.now())

    # -- due timers: purge, decide, claim ------------------------------------------------

    def _fire_due(self) -> list[Claim]:
        """Purge, decide and persist what is due; returns the claims to send once committed."""
        if self._stopping:
            return []
        self._fired = time.monotonic()
        room = self.settings.max_in_flight - len(self._sends.in_flight)
        now = self._clock.now()
        limit = max(0, min(room, self.settings.max_claims))
        dues = list(self._states.queue.pop_due(now, limit))
        if not dues:
            return []
        self._refresh_views(within_s=_DECIDE_REFRESH_S)
        if any(d.kind is DueKind.PURGE and self._states.dirty(d.key, d.partition) for d in dues):
            self.app.commit()  # the settled record is persisted before its tombstone
        self.app.begin()
        waiting: list[tuple[Pending, int, Table]] = []
        for due in dues:
            found = self._states.current(due.key, due.partition)
            if found is None:
                continue
            store, record = found
            if due.kind is DueKind.PURGE:
                self._purge(record, due.partition, store)
                continue
            pending = self._prepare(record, due.partition, store, now)
            if pending is not None:
                waiting.append((pending, due.partition, store))
        if not waiting:
            return []
        assert self._planner is not None
        checks = self._planner.charge([pending for pending, _, _ in waiting])
        claims: list[Claim] = []
        for (pending, partition, store), check in zip(waiting, checks, strict=True):
            decision = self._planner.complete(pending, check)
            claim = self._apply(pending.record, pending.entry, decision, partition, store)
            if claim is not None:
                claims.append(claim)
        return claims

    def _prepare(
        self, record: DeliveryRecord, partition: int, store: Table, now: datetime
    ) -> Pending | None:
        """Decide what needs no budget; return what waits for its charge."""
        key = record.key
        if record.state.status is _S.DISPATCHING:
            if self._sends.claimed(key, store):
                return None
            record = record.moved(restore(record.state), record.detail)
        state = record.state
        if state.status is not _S.PENDING:
            self._states.schedule(record, partition, store)
            return None
        if state.due_at > now:
            self._states.queue.schedule(key, partition, DueKind.ATTEMPT, state.due_at)
            return None
        entry = self._states.entry(key, partition)
        if entry is None:  # the outbox no longer holds it: nothing left to deliver
            self._states.write(store, record.moved(cancel(state, now)))
            self._metrics.cancellations.inc()
            self._states.queue.schedule(key, partition, DueKind.PURGE, now)
            return None
        assert self._planner is not None
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
            kind = self._sends.kind(entry)
            return Claim(record.key, partition, plan.state.attempt, entry, kind, store)
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
        if record.state.status in (_S.PENDING, _S.DISPATCHING):
            return
        self._states.delete(store, record.key)
        self.app.context(partition).produce(self._outbox_topic, record.key, None, partition)
        self._metrics.purges.inc()

    # -- answers -------------------------------------------------------------------------

    def _record_answers(self) -> bool:
        """Record the answers collected (in the open transaction); False if there were none."""
        answers = self._sends.take()
        if not answers:
            return False
        self.app.begin()
        now = self._clock.now()
        for claim, result in answers:
            self._record(claim, result, now)
        self._metrics.in_flight.set(len(self._sends.in_flight))
        return True

    def _record(self, claim: Claim, result: SendResult, now: datetime) -> None:
        self._metrics.deliveries.labels(result.label, claim.adapter).inc()
        if result.repeat_risk:
            self._metrics.repeat_risk.labels(claim.adapter).inc()
        found = self._states.current(claim.key, claim.partition)
        if found is None or found[0] is not claim.store:
            return  # revoked or rebuilt since the claim: the new owner sends it again
        store, record = found
        state = record.state
        if state.status is not _S.DISPATCHING or state.attempt != claim.attempt:
            return
        entry = claim.entry
        ctx = self.app.context(claim.partition)
        if result.ok:
            record = record.moved(succeed(state, now))
            for out in result.records:
                ctx.produce(out.topic, out.key, out.value)
            self._after_commit.extend(result.after_commit)
            since = entry.evidence_observed_at or entry.created_at
            self._metrics.end_to_end.observe(max(0.0, (now - since).total_seconds()))
        else:
            assert result.error is not None
            moved = fail(
                state, result.error, now, policy=entry.retry, retry_after=result.retry_after
            )
            record = record.moved(moved)
            if moved.status is _S.DEAD_LETTER:
                self._dead_letter(ctx, record, entry, result.error)
            else:
                self._metrics.retries.labels(result.error.value).inc()
                assert self._lifecycle is not None
                if self._lifecycle.dropping(record, entry.created_at) is not None:
                    record = record.moved(cancel(moved, now))
                    self._metrics.cancellations.inc()
        self._states.write(store, record)
        self._states.schedule(record, claim.partition, store)

    def _dead_letter(
        self, ctx: ProcessContext, record: DeliveryRecord, entry: OutboxEntry, error: ErrorCode
    ) -> None:
        headers = dead_letter_headers(
            error.value, self._outbox_topic, ctx.partition, record.outbox_offset
        )
        value = self._states.outbox_value(record.key, ctx.partition, entry)
        ctx.produce(self._dlq_topic, record.key, value, headers=[*headers])
        self._metrics.dead_letters.labels(error.value).inc()
