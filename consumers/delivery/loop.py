"""The delivery consumer group: outbox entries delivered at least once, fenced, budgeted (§4).

Owns :class:`DeliveryWorker` with its settings and deps; a turn reads the outbox, records the
answers that came back (``results``), fires the due timers (``claims``), commits, and only then
sends the claims (``sends``). Leaves out the rules (``pipeline.rules.dispatch``), destinations
(``adapters``) and the process around it (``pipeline.cli.delivery_cmd``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta

from prometheus_client import REGISTRY, CollectorRegistry

from consumers.delivery.adapters import AdapterRegistry
from consumers.delivery.claims import Claimer
from consumers.delivery.due import DueKind
from consumers.delivery.intake import Intake
from consumers.delivery.metrics import DeliveryMetrics, delivery_metrics
from consumers.delivery.planner import Planner
from consumers.delivery.results import Recorder
from consumers.delivery.sends import Claim, Executor, SendPool
from consumers.delivery.states import OUTBOX, STATE, DeliveryStates
from consumers.delivery.sweep import sweep
from pipeline.clock import Clock, SystemClock
from pipeline.crypto import KeyRing
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.delivery_state import (
    DeliveryRecord,
    decode_record,
)
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import NO_CEILINGS, BudgetCaps, BudgetCeilings
from pipeline.rules.dispatch import BUDGET_UNAVAILABLE_RETRY
from pipeline.rules.errors import BrokerError
from pipeline.runtime.app import GroupProtocol, StreamApp
from pipeline.runtime.recovery import run_steps
from pipeline.runtime.tables import TableKind, TableSpec
from pipeline.runtime.views import GrantIndex, KeyView, LifecycleIndex

__all__ = ["DEFAULT_GROUP", "DeliveryDeps", "DeliverySettings", "DeliveryWorker"]

log = logging.getLogger(__name__)

DEFAULT_GROUP = "vigil.delivery"
LIFECYCLE = "lifecycle"
GRANTS = "grants"
KEYS = "keys"

# Before deciding due entries, grants and lifecycle are at most this old: a revocation or a
# cancel applies to every attempt decided from 50 ms after it reached the broker.
_DECIDE_REFRESH_S = 0.05


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    """How one delivery process runs. ``budget_defaults`` fill caps a definition leaves out;
    ``budget_ceilings`` bound every cap."""

    bootstrap: str
    topology: Topology
    instance_id: str
    group_id: str = DEFAULT_GROUP
    budget_defaults: BudgetCaps = field(
        default_factory=lambda: BudgetCaps(window=timedelta(hours=1))
    )
    budget_ceilings: BudgetCeilings = NO_CEILINGS  # the most any window may allow
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
    group_protocol: GroupProtocol = GroupProtocol.CLASSIC


@dataclass(frozen=True, slots=True)
class DeliveryDeps:
    """The worker's collaborators: its destinations, the budget store and the key ring the
    adapters seal ledger records with (its keys follow the ``keys`` table here). ``executor``
    runs fired ``prompt`` and ``run`` entries (none: they are rejected)."""

    adapters: AdapterRegistry
    budgets: RedisBudgets
    ring: KeyRing
    executor: Executor | None = None
    clock: Clock = field(default_factory=SystemClock)
    codec: AvroCodec = field(default_factory=default_codec)
    metrics_registry: CollectorRegistry = REGISTRY


class DeliveryWorker:
    """One member of the delivery group. No network until :meth:`run` (or :meth:`start`).

    - ``outbox`` is the input (``read_committed``), co-partitioned with ``delivery-state``, this
      group's own changelog table. A new entry becomes ``pending`` in the transaction that commits
      its outbox offset; from then on the restored table and a due-time queue drive it, so one slow
      key never holds back a partition. The queue is rebuilt whenever the table is restored or
      rolled back; ``dispatching`` entries found there are ``pending`` again with the same key and
      attempt count, unless this worker sent that very claim (its answer awaited or held: recorded,
      not sent again).
    - Due entries are decided (lifecycle, authorization, quiet hours, Redis budgets), and the many
      that may go are claimed (``dispatching``, attempt + 1) in one transaction carrying the offsets
      and group metadata, so a zombie's claim cannot commit. Only after it commits are their
      destinations called, concurrently, off the poll thread; the results are recorded in a later
      transaction: ``delivered``, ``pending`` after the §8 backoff, or ``dead_letter`` (also copied
      to ``dead-letter``).
    - ``redeliveries`` is a second input, co-partitioned with ``outbox`` (see ``intake``); a
      redelivered entry is decided like any due entry — lifecycle, grants and budgets rechecked.
    - ``keys``, ``lifecycle`` and ``grants`` are read whole: an entry that no longer opens (its
      subject erased) is never sent, only ``cancelled`` and purged; entries of a cancelled watcher
      or an erased subject are ``cancelled`` and purged at once; other settled entries are purged
      once their delivery retention has passed.

    Delivery is at least once: a crash between a send and its recorded result sends again under the
    same delivery key, which every adapter passes on. A failover that rolls the worker's transaction
    back or resyncs it sends nothing again that the worker knows: a claim whose send is in flight or
    whose answer it holds is recorded with that answer once the tables are back (``results``).
    """

    def __init__(self, settings: DeliverySettings, deps: DeliveryDeps) -> None:
        self.settings = settings
        topology = settings.topology
        self._outbox_topic = topology.name(Topic.OUTBOX)
        self._redeliveries_topic = topology.name(Topic.REDELIVERIES)
        self._dlq_topic = topology.name(Topic.DEAD_LETTER)
        self._budgets = deps.budgets
        self._clock = deps.clock
        self._codec = deps.codec
        self.ring = deps.ring
        self._metrics = delivery_metrics(deps.metrics_registry)
        self.app = self._stream_app(deps.metrics_registry)
        tables, self._tx = self.app.tables, self.app.transaction()
        self._states = DeliveryStates(tables, self._tx, self._codec, self.ring)
        self._sends = SendPool(
            deps.adapters,
            settings.senders,
            batch=settings.result_batch,
            linger_s=settings.linger_s,
            executor=deps.executor,
        )
        # Views of the global tables, empty until start() loads them.
        self._keys = KeyView(tables.whole(KEYS), self.ring)
        self._intake = Intake(
            self._redeliveries_topic,
            self._codec,
            self._keys,
            self._states,
            self._clock,
            self._metrics,
        )
        self._grants = GrantIndex(tables.whole(GRANTS), self._codec)
        self._lifecycle = LifecycleIndex(tables.whole(LIFECYCLE), self._codec)
        self._claimer, self._recorder = self._claimer_and_recorder()
        self._views_read = 0.0
        self._fired = 0.0
        self._started = False
        self._stopping = False

    def _stream_app(self, metrics_registry: CollectorRegistry) -> StreamApp:
        topology, settings = self.settings.topology, self.settings
        return StreamApp(
            settings.bootstrap,
            settings.group_id,
            settings.instance_id,
            [self._outbox_topic, self._redeliveries_topic],
            lambda batch, ctx: self._intake.process(batch, ctx),
            tables=[
                TableSpec(STATE, topology.name(Topic.DELIVERY_STATE), TableKind.OWNED),
                TableSpec(OUTBOX, self._outbox_topic, TableKind.EXTERNAL),
                TableSpec(LIFECYCLE, topology.name(Topic.LIFECYCLE), TableKind.GLOBAL),
                TableSpec(GRANTS, topology.name(Topic.GRANTS), TableKind.GLOBAL),
                TableSpec(KEYS, topology.name(Topic.KEYS), TableKind.GLOBAL),
            ],
            decode=lambda msg: self._intake.decode(msg),
            dead_letter_topic=self._dlq_topic,
            commit_interval_ms=settings.commit_interval_ms,
            consumer_overrides=dict(settings.consumer_overrides),
            group_protocol=settings.group_protocol,
            metrics_registry=metrics_registry,
            schemas_topic=topology.name(Topic.SCHEMAS),
            codec=self._codec,
            outputs=[topology.name(Topic.NOTIFICATIONS)],
        )

    def _claimer_and_recorder(self) -> tuple[Claimer, Recorder]:
        self._plan = self._planner()
        claimer = Claimer(
            self._tx,
            self._states,
            self._plan,
            self._metrics,
            self._outbox_topic,
            in_flight=self._claimed,
            adapter_of=self._sends.kind,
            dead_letter_topic=self._dlq_topic,
        )
        recorder = Recorder(
            self._tx,
            self._states,
            self._lifecycle,
            self._metrics,
            outbox_topic=self._outbox_topic,
            dead_letter_topic=self._dlq_topic,
        )
        return claimer, recorder

    def _planner(self) -> Planner:
        return Planner(
            grants=self._grants,
            lifecycle=self._lifecycle,
            budgets=self._budgets,
            budget_defaults=self.settings.budget_defaults,
            budget_ceilings=self.settings.budget_ceilings,
            unavailable_retry=self.settings.unavailable_retry,
            catch_up=self.app.tables.catch_up,
        )

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if self._started:
            return
        self.app.start()
        # What start() loaded is where the views begin: records already there are applied,
        # not swept (a lifecycle record reaches what is queued when it changes).
        self._keys.refresh()
        self._grants.refresh()
        self._lifecycle.refresh()
        self._views_read = time.monotonic()
        self._sends.start()
        self._started = True

    def run(self, stop: threading.Event) -> None:
        """Deliver until ``stop`` is set; then wait for sends in flight, record, commit, leave."""
        try:
            run_steps(self.app, self.step, stop, start=self.start)
            if self._started:
                self.drain()
        finally:
            self.close()

    def step(self) -> None:
        """One turn: read the outbox, record answers, fire due timers, then commit what was
        written — claims before their sends, and every state before a timer moves its key
        again (one commit per turn, whatever it holds)."""
        # New entries are claimed and committed in this same turn: waiting for more after
        # the first only delays them (the evaluator's commits bring the outbox in bursts), and
        # so would a commit of their `pending` states before the claim (one commit per turn).
        self.app.read(self._poll_timeout())
        rebuilt = self._states.sync(self._claimed)  # rolled back or restored: held answers too
        self._sends.collect()
        recorded = (self._sends.ready() or rebuilt) and self._record_answers()
        self._refresh_views()
        claims: list[Claim] = []
        idle = not self._sends.in_flight
        if recorded or idle or time.monotonic() - self._fired >= self.settings.linger_s:
            claims = self._fire_due()
        if recorded or claims or self._tx.due():
            self._commit(claims)

    def _commit(self, claims: list[Claim]) -> None:
        """Commit; only then send the claims and write what waits for the commit."""
        after, self._recorder.after_commit = self._recorder.after_commit, []
        if not self._tx.commit():
            return  # rolled back: the next turn rebuilds the queue from the tables
        for claim in claims:
            self._sends.submit(claim)
            self._metrics.attempts.labels(claim.adapter).inc()
        self._metrics.in_flight.set(len(self._sends.in_flight))
        if after:
            self._tx.begin()
            context = self._tx.context(-1)
            for out in after:
                context.produce(out.topic, out.key, out.value)

    def drain(self) -> None:
        """Stop claiming; record what the destinations in flight answer (bounded wait)."""
        self._stopping = True
        deadline = time.monotonic() + self.settings.drain_timeout_s
        try:
            while self._sends.in_flight and time.monotonic() < deadline:
                self.app.step(0.01)
                self._states.sync(self._claimed)
                self._sends.collect()
                self._record_answers()
            self._commit([])
        except BrokerError as exc:  # the broker is away: the next owner sends what is unrecorded
            log.warning("stopping without recording every answer: %s", exc)

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
        for store in self.app.tables.stores_of(STATE).values():
            for key, raw in store.items():
                out[key] = decode_record(self._codec, raw)
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

    # -- grants and lifecycle ------------------------------------------------------------

    def _refresh_views(self, within_s: float | None = None) -> None:
        """Catch ``grants`` and ``lifecycle`` up if they were last read more than ``within_s``
        (default: the idle refresh interval) ago; sweep what a new lifecycle record drops."""
        age = time.monotonic() - self._views_read
        if age < (self.settings.table_refresh_s if within_s is None else within_s):
            return
        self.app.tables.catch_up()
        self._views_read = time.monotonic()
        self._keys.refresh()
        self._grants.refresh()
        dropping = self._lifecycle.dropping_records()
        if dropping:
            self._tx.begin()
            sweep(dropping, self._states, self._budgets, self._metrics, self._clock.now())

    # -- the steps: claim (claims), send (sends), record (results) -------------------------

    def _fire_due(self) -> list[Claim]:
        """Purge, decide and persist what is due; returns the claims to send once committed."""
        if self._stopping:
            return []
        self._fired = time.monotonic()
        room = self.settings.max_in_flight - len(self._sends.in_flight)
        now = self._clock.now()
        dues = list(self._states.queue.pop_due(now, max(0, min(room, self.settings.max_claims))))
        if not dues:
            return []
        self._refresh_views(within_s=_DECIDE_REFRESH_S)
        self._plan.stale = self._views_read < self._fired  # read before these dues arrived
        if any(d.kind is DueKind.PURGE and self._states.dirty(d.key, d.partition) for d in dues):
            self._tx.commit()  # the settled record is persisted before its tombstone
        self._tx.begin()
        return self._claimer.fire(dues, now)

    def _record_answers(self) -> bool:
        """Record the answers collected, and those held from a transaction that was rolled
        back or lost in a resync (in the open transaction); False if none was recorded."""
        self._recorder.hold(self._sends.take())
        if not self._recorder.record_held(self._clock.now()):
            return False
        self._metrics.in_flight.set(len(self._sends.in_flight))
        return True

    def _claimed(self, record: DeliveryRecord) -> bool:
        """Whether ``record`` is a claim this worker sent: its answer is awaited or held, so
        the claim is recorded, never sent again (``sends``, ``results``)."""
        return self._sends.claimed(record) or self._recorder.holds(record)
