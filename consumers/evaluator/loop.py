"""The evaluator's processor: decisions in one transaction with their inputs (DESIGN §2, §3, §10).

Owns :class:`Evaluator`: for each input, the watchers of its source (a tick: the one it names),
the budget charged in Redis per input position + watcher key, the pure
:func:`~pipeline.rules.evaluation.evaluate`, and watcher-state, receipt, outbox entry and
``close`` command written in the input's transaction. Leaves out the stage (``stage``) and the
batch's records written in one native call (``fused``).
"""

from __future__ import annotations

import logging
from collections.abc import Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from prometheus_client import REGISTRY

from consumers.evaluator.fused import FusedWrites, Written, written
from consumers.evaluator.heap import settle_heap
from consumers.evaluator.lifecycle import LifecycleTracker
from consumers.evaluator.metrics import EvaluatorMetrics, evaluator_metrics
from consumers.evaluator.plan import Plan, effective_state
from pipeline.clock import Clock, SystemClock
from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.command import encode_command
from pipeline.records.event import evidence_from_event
from pipeline.records.tick import evidence_from_tick
from pipeline.records.watcher import Watch
from pipeline.records.watcher_state import decode_state
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import NO_CEILINGS, BudgetCaps, BudgetCeilings
from pipeline.rules.commands.system import close_command
from pipeline.rules.errors import (
    DefinitionError,
    ErasedError,
    SerdeError,
)
from pipeline.rules.evaluation import Evaluation
from pipeline.rules.evidence import Evidence, position_of
from pipeline.rules.keys import watcher_key
from pipeline.rules.outcomes import Outcome, Reason
from pipeline.rules.watcher_state import WatcherState
from pipeline.runtime.app import InputRecord, ProcessContext
from pipeline.runtime.processing import Message
from pipeline.runtime.state import TaskState
from pipeline.runtime.tables import Table, TableKind, TableSpec
from pipeline.runtime.views import DecodedCache, GrantIndex, KeyView, WatcherIndex

__all__ = ["Evaluator", "Input", "table_specs"]

log = logging.getLogger(__name__)

_STATE, _WATCHERS, _GRANTS, _LIFECYCLE = "watcher-state", "watchers", "grants", "lifecycle"
_KEYS = "keys"
_HOME_MEMO = 16_384  # source ids whose partition is remembered (every in-memory map is bounded)


class Input(NamedTuple):
    """A decoded input record: its evidence, and its raw bytes for a re-route. ``evidence``
    None: a tick whose key is gone (erased), found so with the keys caught up. (A tuple: one is
    built per input.)"""

    evidence: Evidence | None
    raw: bytes
    watcher_version: int | None = None  # ticks name the version they were made for


@dataclass(slots=True)
class _Task:
    """What the evaluator holds for one task partition; rebuilt when the runtime restores it."""

    index: WatcherIndex
    state: Table
    cache: DecodedCache[WatcherState] = field(default_factory=DecodedCache)


class Evaluator:
    """The processor: one call per task partition per batch, inside the open transaction. Its
    views of the whole tables are built once over ``tables`` (the app's: the global ones exist,
    empty, before start), so nothing is attached later.

    ``watchers`` is an external co-partitioned table caught up to its end before each batch, so a
    create, pause or revocation applies to everything after it. An event found off its source's
    Java-default partition (a foreign producer) is re-produced to that partition instead.

    Definitions and tick payloads are opened with the ``keys`` table's ring; receipts are sealed
    under the watcher version's evidence key (``retain_until`` from its evidence retention), outbox
    entries under the subject's key. A tick or a definition that no longer opens (cancelled, erased)
    is skipped and counted, never evaluated on an empty payload. Redis unreachable: the batch aborts
    and rewinds and the stage retries; nothing is ever evaluated unbudgeted.
    """

    def __init__(
        self,
        topology: Topology,
        budgets: RedisBudgets,
        default_caps: BudgetCaps,
        tables: TaskState,
        *,
        clock: Clock | None = None,
        codec: AvroCodec | None = None,
        evaluators: Set[str] = frozenset(),
        metrics: EvaluatorMetrics | None = None,
        ceilings: BudgetCeilings = NO_CEILINGS,
        keks: KeyEncryptionKeys | None = None,
        key_cache: int = 65_536,
    ) -> None:
        """``keks`` default to ``$VIGIL_MASTER_KEYS`` (none there: a ``ConfigError``)."""
        self._topology = topology
        self._budgets = budgets
        self._default_caps = default_caps
        self._ceilings = ceilings
        self._clock = clock or SystemClock()
        self._codec = codec or default_codec()
        self._ring = KeyRing(keks or KeyEncryptionKeys.load(), self._codec, cache_size=key_cache)
        self._fused = FusedWrites.of(self._codec, self._ring)
        self._tables = tables
        self._keys = KeyView(tables.whole(_KEYS), self._ring)
        self._grants = GrantIndex(tables.whole(_GRANTS), self._codec)
        self._lifecycle = LifecycleTracker(tables.whole(_LIFECYCLE), self._codec)
        self._evaluators = evaluators
        self.metrics = metrics or evaluator_metrics(REGISTRY)
        self._events = topology.name(Topic.EVENTS)
        self._ticks = topology.name(Topic.TICKS)
        self._receipts = topology.name(Topic.RECEIPTS)
        self._outbox = topology.name(Topic.OUTBOX)
        self._commands = topology.name(Topic.COMMANDS)
        self._partitions = topology.partitions_for(Topic.EVENTS)
        self._home: dict[str, int] = {}  # source id → its partition, at most _HOME_MEMO
        self._tasks: dict[int, _Task] = {}

    @property
    def codec(self) -> AvroCodec:
        """The Avro codec this evaluator reads and writes with."""
        return self._codec

    # -- decoding (called by the runtime for every input record) ---------------------------

    def decode(self, msg: Message) -> Input:
        """An input record as evidence; bytes that are not one raise ``SerdeError``."""
        raw = msg.value()
        if raw is None:
            raise SerdeError("an input record has no value (a tombstone?)")
        record_type, value = self._codec.decode(raw)
        topic = msg.topic() or ""
        position = position_of(topic, msg.partition() or 0, msg.offset() or 0)
        expected = "event" if topic == self._events else "tick"
        if record_type != expected:
            raise SerdeError(f"a {record_type} record on {topic}, which carries {expected}s")
        try:
            if expected == "event":
                return Input(evidence_from_event(value, position), raw)
            version = int(value["watcher_version"])
            self._keys.refresh()  # the runtime caught the tables up before decoding
            try:
                return Input(evidence_from_tick(value, position, self._ring), raw, version)
            except ErasedError:
                return Input(None, raw, version)  # its key is gone: opened once, erased
        except SerdeError:
            raise
        except Exception as exc:  # any value a decoder cannot read is the record's failure
            raise SerdeError(f"not valid evidence: {type(exc).__name__}: {exc}") from exc

    # -- processing ------------------------------------------------------------------------

    def __call__(self, batch: list[InputRecord], ctx: ProcessContext) -> None:
        now = self._clock.now()
        self._keys.refresh()
        task = self._task(ctx)
        grants = self._grants
        grants.refresh()
        lifecycle = self._lifecycle
        lifecycle.refresh()
        lifecycle.apply(ctx.partition, task.state)
        plan = Plan(self._budgets, self._default_caps, now, self._evaluators, self._ceilings)
        events = self._events
        for record in batch:
            item: Input = record.value
            evidence = item.evidence
            if evidence is None:
                self.metrics.skipped.labels("tick_erased").inc()
                continue
            topic = record.topic
            if topic == events:
                home = self._home_of(evidence.source_id)
                if home != ctx.partition:
                    self._reroute(ctx, record, item, home)
                    continue
                watches = task.index.for_event(evidence.source_id, evidence.event_type or "")
            else:
                watches = self._ticked(task, item, evidence)
            if not watches:
                continue
            position = (topic, ctx.partition, record.offset)
            for watch in watches:
                if watch.closed:
                    continue
                state = plan.state_of(watch.key) or effective_state(
                    watch, self._stored(task, watch.key)
                )
                plan.add(watch, state, evidence, position, grants.of(*watch.parts[:2]))
        tally: dict[tuple[Outcome, Reason], int] = {}
        decided: list[tuple[Watch, WatcherState, Evaluation]] = []
        for step in plan.settle():
            if step.erased:
                self.metrics.skipped.labels("watcher_erased").inc()
            elif step.invalid:
                self.metrics.skipped.labels("watcher_invalid").inc()
            elif step.result is not None:
                decided.append((step.watch, step.state, step.result))
                kind = (step.result.outcome, step.result.reason)
                tally[kind] = tally.get(kind, 0) + 1
        self._count(tally, self._write(ctx, task, decided, now))

    def _ticked(self, task: _Task, item: Input, evidence: Evidence) -> tuple[Watch, ...]:
        """A tick names its watcher: only that one, and only the version it was made for."""
        assert evidence.watcher_key is not None
        watch = task.index.get(watcher_key(*evidence.watcher_key))
        if watch is None:
            self.metrics.skipped.labels("tick_unknown_watcher").inc()
            return ()
        if item.watcher_version != watch.version:
            self.metrics.skipped.labels("tick_other_version").inc()
            return ()
        return (watch,)

    def _write(
        self,
        ctx: ProcessContext,
        task: _Task,
        decided: list[tuple[Watch, WatcherState, Evaluation]],
        now: datetime,
    ) -> int:
        """The batch's records in the order decided (one fused native call on the native path,
        ``fused.written``); returns how many outbox entries it wrote."""
        records = written(self._fused, self._codec, self._ring, decided, now)
        pairs = zip(decided, records, strict=True)
        return sum(self._produce(ctx, task, w, r, one, now) for (w, _, r), one in pairs)

    def _produce(
        self,
        ctx: ProcessContext,
        task: _Task,
        watch: Watch,
        result: Evaluation,
        records: Written,
        now: datetime,
    ) -> int:
        """One evaluation's records into the transaction; returns its outbox entries (0 or 1)."""
        data, value, sealed = records
        if data is not None:
            task.state.set(watch.key, data)
            task.cache.put(watch.key, data, result.next_state)
        ctx.produce(self._receipts, watch.key, value, partition=self._home_of(watch.source_id))
        entry = result.outbox
        if entry is not None and sealed is not None:
            ctx.produce(self._outbox, entry.delivery_key, sealed)
        if result.close is not None:
            trigger_key = result.receipt.trigger_key
            command = close_command(watch.parts, watch.version, result.close, trigger_key, now)
            value = encode_command(self._codec, self._ring, command)
            ctx.produce(self._commands, command.subject_key, value)
            self.metrics.close_commands.labels(result.close.value).inc()
        return 0 if entry is None else 1

    def _count(self, tally: dict[tuple[Outcome, Reason], int], entries: int) -> None:
        """A batch's decisions into the counters: one increment per kind, not per record."""
        metrics = self.metrics
        for (outcome, reason), count in tally.items():
            metrics.evaluations.labels(outcome.value, reason.value).inc(count)
            if reason is Reason.BUDGET_EXHAUSTED:
                metrics.budget_suppressions.inc(count)
        if entries:
            metrics.outbox_entries.inc(entries)

    def _reroute(self, ctx: ProcessContext, record: InputRecord, item: Input, home: int) -> None:
        """A foreign producer's event: put it where its source's tables are (DESIGN.md §10)."""
        origin = f"{record.partition}:{record.offset}".encode()
        headers: list[tuple[str, str | bytes | None]] = [("vigil.rerouted-from", origin)]
        ctx.produce(record.topic, record.key, item.raw, partition=home, headers=headers)
        self.metrics.rerouted.labels(record.topic).inc()

    # -- views -----------------------------------------------------------------------------

    def _task(self, ctx: ProcessContext) -> _Task:
        watchers = ctx.table(_WATCHERS)
        state = ctx.table(_STATE)
        task = self._tasks.get(ctx.partition)
        if task is None or task.index.table is not watchers or task.state is not state:
            task = _Task(WatcherIndex(watchers, self._codec, self._ring), state)
            self._tasks[ctx.partition] = task
            settle_heap()
        else:
            task.index.refresh()
        return task

    def prepare(self, compile_definitions: bool = False) -> int:
        """Index the partitions the app holds now before the first batch (and compile every
        definition if asked, as a running evaluator has); returns the watchers indexed."""
        self._keys.refresh()  # take in what start loaded
        states = self._tables.stores_of(_STATE)
        for partition, watchers in self._tables.stores_of(_WATCHERS).items():
            state = states.get(partition)
            if state is None:
                continue
            task = _Task(WatcherIndex(watchers, self._codec, self._ring), state)
            self._tasks[partition] = task
            if compile_definitions:
                for watch in task.index:
                    try:
                        watch.definition.compile()
                    except (ErasedError, DefinitionError) as exc:
                        log.warning("watcher %s not compiled: %s", watch.key, exc)
        settle_heap()
        return sum(len(task.index) for task in self._tasks.values())

    def _stored(self, task: _Task, key: str) -> WatcherState | None:
        raw = task.state.get(key)
        if raw is None:
            return None
        return task.cache.get(key, raw, self._decode_state)

    def _decode_state(self, raw: bytes) -> WatcherState:
        return decode_state(self._codec, raw)

    def _home_of(self, source_id: str) -> int:
        home = self._home.get(source_id)
        if home is None:
            if len(self._home) >= _HOME_MEMO:  # source ids are input: the memo stays bounded
                self._home.clear()
            home = partition_for(source_id, self._partitions)
            self._home[source_id] = home
        return home


def table_specs(topology: Topology) -> list[TableSpec]:
    """The evaluator's tables: ``watchers`` (external), its own ``watcher-state``, and
    ``grants``, ``lifecycle`` and ``keys`` whole."""
    return [
        TableSpec(_WATCHERS, topology.name(Topic.WATCHERS), TableKind.EXTERNAL),
        TableSpec(_STATE, topology.name(Topic.WATCHER_STATE), TableKind.OWNED),
        TableSpec(_GRANTS, topology.name(Topic.GRANTS), TableKind.GLOBAL),
        TableSpec(_LIFECYCLE, topology.name(Topic.LIFECYCLE), TableKind.GLOBAL),
        TableSpec(_KEYS, topology.name(Topic.KEYS), TableKind.GLOBAL),
    ]
