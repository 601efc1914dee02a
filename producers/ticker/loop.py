"""The poll ticker: due instants → governed tool calls → ``ticks``, exactly once (DESIGN.md §2,
§5, §8, §10).

Owns :class:`PollTicker` with its settings and deps: a member over ``watchers`` and ``events``
with its own ``ticker-state``, whose step plans the due watchers, calls the allowed tools outside
any transaction, then writes the ticks and memories in one. Leaves out the rules
(``pipeline.rules.ticker``, ``cron``), the tools and the command line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from prometheus_client import REGISTRY, CollectorRegistry

from pipeline.clock import Clock, SystemClock
from pipeline.config import ToolConfig
from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.tick import TickRecord, encode_tick
from pipeline.records.ticker_state import encode_memory
from pipeline.records.watcher import Watch
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import NO_CEILINGS, BudgetCaps, BudgetCeilings, BudgetVerdict
from pipeline.rules.lifecycle import is_closed
from pipeline.rules.retention import retain_until
from pipeline.rules.ticker import DEFAULT_GRACE, WatcherPlan, plan_watcher
from pipeline.runtime.app import GroupProtocol, ProcessContext, StreamApp, TransactionEnd
from pipeline.runtime.recovery import run_steps
from pipeline.runtime.tables import TableKind, TableSpec
from pipeline.runtime.views import GrantIndex, KeyView
from producers.ticker.calls import GovernedCalls
from producers.ticker.guard import ToolGuard, Withheld
from producers.ticker.metrics import TickerMetrics, ticker_metrics
from producers.ticker.pinned_states import PinnedStates
from producers.ticker.tools import ToolResult, build_registry
from producers.ticker.views import STATE, WATCHERS, TickerViews

__all__ = ["PollTicker", "StepReport", "TickerDeps", "TickerSettings"]

log = logging.getLogger(__name__)

_GRANTS: Final = "grants"
_KEYS: Final = "keys"
_DEFER: Final = timedelta(seconds=1)  # a watcher whose budget store did not answer


@dataclass(frozen=True, slots=True)
class TickerSettings:
    """Where the ticker runs and how: broker, topics, stable identity, rules' knobs."""

    bootstrap: str
    topology: Topology
    instance_id: str
    group_id: str = ""
    grace: timedelta = DEFAULT_GRACE
    concurrency: int = 16
    poll_timeout_s: float = 0.05
    commit_interval_ms: int = 100
    static_membership: bool = False  # a restart with the same instance id keeps its partitions
    group_protocol: GroupProtocol = GroupProtocol.CLASSIC
    consumer_overrides: dict[str, Any] = field(default_factory=dict)
    tools: Mapping[str, ToolConfig] = field(default_factory=dict)  # [tools.*]
    default_caps: BudgetCaps | None = None  # caps for watchers that leave some out
    ceilings: BudgetCeilings = NO_CEILINGS  # the most any window may allow
    key_cache: int = 65_536  # data keys the ring keeps open

    @property
    def group(self) -> str:
        return self.group_id or f"{self.topology.prefix}ticker"


@dataclass(frozen=True, slots=True)
class TickerDeps:
    """The ticker's collaborators. No ``budgets``: no evaluation budget is read before a call.
    ``keks`` default to ``$VIGIL_MASTER_KEYS`` (none there: a ``ConfigError``)."""

    budgets: RedisBudgets | None = None
    keks: KeyEncryptionKeys = field(default_factory=KeyEncryptionKeys.load)
    clock: Clock = field(default_factory=SystemClock)
    codec: AvroCodec = field(default_factory=default_codec)
    metrics_registry: CollectorRegistry = REGISTRY


@dataclass(frozen=True, slots=True)
class StepReport:
    """What one step did (tests and logs)."""

    planned: int = 0
    ticks: int = 0
    tool_calls: int = 0
    deferred: int = 0
    committed: bool = True


@dataclass(slots=True)
class _Work:
    """One watcher's plan on its way to a transaction."""

    key: str
    watch: Watch
    plan: WatcherPlan
    budget: BudgetVerdict = BudgetVerdict.OK  # read before any tool call
    results: dict[int, ToolResult] = field(default_factory=dict)  # tick index → tool answer
    records: list[tuple[str, bytes]] = field(default_factory=list)  # encoded ticks, by source
    memory: bytes | None = None  # the encoded ticker-state record


class PollTicker:
    """The ticker process: :meth:`step` until stopped (see the module docstring).

    Partition *p* of ``watchers``, ``events``, ``ticks`` and ``ticker-state`` lands on one member
    (range assignor). ``watchers`` is an external table caught up before every step, so a pause or
    revocation applies to every tick after it; ``grants`` is whole; ``ticker-state`` holds per
    watcher the last instant enumerated and per run or session the pinned evaluators' state.

    One step: read the clock once; plan every watcher the :class:`Agenda` says is due; for each poll
    tick recheck the grant (revoked → no call; the tick carries ``tool_error = rejected`` so the
    evaluator records the denial) and the evaluation budget (exhausted → the same; Redis down → the
    watcher is deferred); call the allowed tools concurrently, outside any transaction; then write
    the ticks and the new memories in one transaction with the input offsets. A restart restores the
    memories, so it neither loses nor repeats a tick; an aborted step plans the same instants again
    with the answers it holds (``calls``). ``observed_at`` of a poll tick is when its tool answered;
    of a schedule or expiry tick, when it was made (§11).
    """

    def __init__(self, settings: TickerSettings, deps: TickerDeps) -> None:
        topology = settings.topology
        self.settings = settings
        self._clock = deps.clock
        self._codec = deps.codec
        self._ring = KeyRing(deps.keks, self._codec, cache_size=settings.key_cache)
        self._guard = ToolGuard(deps.budgets, settings.default_caps, settings.ceilings)
        self.metrics: TickerMetrics = ticker_metrics(deps.metrics_registry)
        self._ticks = topology.name(Topic.TICKS)
        self._views = TickerViews(self._codec, self._ring)
        self.states = PinnedStates(
            self._codec,
            topology.name(Topic.EVENTS),
            topology.partitions_for(Topic.TICKER_STATE),
            self._views,
        )
        self.tools = build_registry(
            settings.tools,
            self.states,
            concurrency=settings.concurrency,
            metrics=self.metrics.tools,
        )
        self._calls = GovernedCalls(self._guard, self.tools, self.metrics)
        self.app = StreamApp(
            settings.bootstrap,
            settings.group,
            settings.instance_id,
            [topology.name(Topic.WATCHERS), topology.name(Topic.EVENTS)],
            self.states.process,
            tables=[
                TableSpec(WATCHERS, topology.name(Topic.WATCHERS), TableKind.EXTERNAL),
                TableSpec(STATE, topology.name(Topic.TICKER_STATE), TableKind.OWNED),
                TableSpec(_GRANTS, topology.name(Topic.GRANTS), TableKind.GLOBAL),
                TableSpec(_KEYS, topology.name(Topic.KEYS), TableKind.GLOBAL),
            ],
            decode=self.states.decode,
            dead_letter_topic=topology.name(Topic.DEAD_LETTER),
            commit_interval_ms=settings.commit_interval_ms,
            static_membership=settings.static_membership,
            group_protocol=settings.group_protocol,
            consumer_overrides=settings.consumer_overrides,
            metrics_registry=deps.metrics_registry,
            schemas_topic=topology.name(Topic.SCHEMAS),
            codec=self._codec,
            # Events are the evaluator's to judge: the ticker reads them for pinned states only.
            judged=[topology.name(Topic.WATCHERS)],
            outputs=[self._ticks],
        )
        # Views of the global tables, empty until start() loads them.
        self._keys = KeyView(self.app.tables.whole(_KEYS), self._ring)
        self._grants = GrantIndex(self.app.tables.whole(_GRANTS), self._codec)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self.app.start()

    def close(self) -> None:
        self.app.close()
        self.tools.close()

    def __enter__(self) -> PollTicker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, stop: threading.Event) -> None:
        """Step until ``stop``; a budget store outage defers single watchers, never the loop; a
        broker outage waits and resyncs (``pipeline.runtime.recovery``)."""
        try:
            run_steps(self.app, self.step, stop, start=self.start)
        finally:
            self.close()

    # -- the step ------------------------------------------------------------------------

    def step(self) -> StepReport:
        """Consume inputs, then emit every tick due at the clock's ``now``."""
        self.app.step(self.settings.poll_timeout_s)
        if not self.app.assignment():
            return StepReport()
        self.app.tables.catch_up()  # watchers, grants, keys: a pause or revocation applies (§10)
        self._keys.refresh()  # a shredded key stops opening definitions now
        views = self._views
        views.sync(self.app.tables)
        now = self._clock.now()
        self._guard.begin_step()
        work, planned, deferred = self._plan(views, now)
        self._grants.refresh()
        calls = self._calls.make(work, self._grants, now)
        observed = self._clock.now()
        writes = self._encoded([w for w in work if w.plan.persist or w.plan.ticks], now, observed)
        if not writes and not views.deletes:
            return StepReport(planned, 0, calls, deferred)
        # Ticks are due because time passed, not because a record arrived: the runtime's
        # timer-driven transaction carries the input offsets, the group metadata and the
        # changelog of ``ticker-state`` exactly as a processed batch would.
        ended = self.app.transaction().run(
            lambda context_of: self._write(context_of, views, writes, now, observed)
        )
        if ended is not TransactionEnd.COMMITTED:
            log.warning("tick transaction aborted: rebuilding the views and planning again")
            views.invalidate()
            return StepReport(planned, 0, calls, deferred, committed=False)
        self._calls.committed()
        ticks = 0
        for item in writes:
            views.memory[item.key] = item.plan.memory
            views.agenda.set(item.key, item.plan.next_check)
            ticks += len(item.plan.ticks)
            self._count(item.plan)
        views.deletes.clear()
        return StepReport(planned, ticks, calls, deferred)

    def _plan(self, views: TickerViews, now: datetime) -> tuple[list[_Work], int, int]:
        """Plan every watcher due at ``now``: (work to write, how many planned, deferred)."""
        work: list[_Work] = []
        deferred = 0
        due = views.agenda.due(now)
        for key in due:
            watch = views.watch.get(key)
            if watch is None:
                continue
            try:
                plan = plan_watcher(
                    watch.definition,
                    watch.status,
                    watch.activated_at,
                    views.memory.get(key),
                    now,
                    grace=self.settings.grace,
                )
            except Exception as exc:  # one watcher's failure is its own, never the ticker's
                log.error("watcher %s is not ticked: %s: %s", key, type(exc).__name__, exc)
                self.metrics.skipped.labels("watcher_invalid").inc()
                views.agenda.set(key, None)  # not again before its record changes
                continue
            if is_closed(watch.status):
                views.forget(key)
                continue
            if not (plan.persist or plan.ticks):
                views.memory[key] = plan.memory
                views.agenda.set(key, plan.next_check)
                self._count(plan)
                continue
            verdict = BudgetVerdict.OK
            if any(t.calls_tool for t in plan.ticks):
                verdict = self._guard.budget(watch, now)
                if verdict is BudgetVerdict.UNAVAILABLE:
                    self.metrics.guarded.labels(Withheld.BUDGET_UNAVAILABLE.value).inc()
                    deferred += 1
                    views.agenda.set(key, now + _DEFER)
                    continue
            work.append(_Work(key, watch, plan, verdict))
        return work, len(due), deferred

    def _encoded(self, writes: list[_Work], now: datetime, observed: datetime) -> list[_Work]:
        """Encode each watcher's ticks and memory before the transaction: a watcher whose
        records cannot be written is skipped (logged, counted) and the others go on."""
        codec = self._codec
        kept: list[_Work] = []
        for item in writes:
            try:
                item.records = [
                    (record.source_id, encode_tick(codec, self._ring, record))
                    for record in self._tick_records(item, now, observed)
                ]
                item.memory = encode_memory(
                    codec, item.watch.parts, item.watch.source_id, item.plan.memory, now
                )
            except Exception as exc:  # one watcher's failure is its own, never the ticker's
                log.error(
                    "watcher %s: ticks not written: %s: %s", item.key, type(exc).__name__, exc
                )
                self.metrics.skipped.labels("watcher_invalid").inc()
                self._views.agenda.set(item.key, None)
                continue
            kept.append(item)
        return kept

    def _write(
        self,
        context_of: Callable[[int], ProcessContext],
        views: TickerViews,
        writes: list[_Work],
        now: datetime,
        observed: datetime,
    ) -> None:
        for key, partition in views.deletes.items():
            state = views.state.get(partition)
            if state is not None:
                state.delete(key)
        for item in writes:
            partition = views.partition[item.key]
            ctx = context_of(partition)
            for source_id, value in item.records:
                ctx.produce(self._ticks, source_id, value, partition)
            assert item.memory is not None
            views.state[partition].set(item.key, item.memory)

    @staticmethod
    def _tick_records(item: _Work, now: datetime, observed: datetime) -> Iterator[TickRecord]:
        tenant_id, user_id, watcher_id = item.watch.parts
        retention = item.watch.definition.privacy.evidence_retention
        for index, tick in enumerate(item.plan.ticks):
            result = item.results.get(index)
            seen = observed if result is not None else now
            yield TickRecord(
                kind=tick.kind,
                tenant_id=tenant_id,
                user_id=user_id,
                watcher_id=watcher_id,
                watcher_version=item.watch.version,
                source_id=item.watch.source_id,
                scheduled_at=tick.scheduled_at,
                observed_at=seen,
                payload=None if result is None else result.payload,
                tool_error=None if result is None else result.error,
                usage_tokens=0 if result is None else result.tokens,
                usage_micro_usd=0 if result is None else result.micro_usd,
                late=tick.late,
                retain_until=retain_until(seen, retention),
            )

    def _count(self, plan: WatcherPlan) -> None:
        metrics = self.metrics
        for tick in plan.ticks:
            metrics.due.labels(tick.kind.value).inc()
        if plan.missed and plan.policy is not None:
            fired = plan.missed - plan.dropped
            if fired:
                metrics.missed.labels(plan.policy, "fired").inc(fired)
            if plan.dropped:
                metrics.missed.labels(plan.policy, "dropped").inc(plan.dropped)
