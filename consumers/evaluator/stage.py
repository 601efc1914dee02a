"""The evaluator stage: one member of the evaluator group, built with no network, then run.

Owns :class:`EvaluatorSettings`, :class:`EvaluatorDeps` and :class:`EvaluatorStage`: its
:class:`~pipeline.runtime.app.StreamApp`, then the :class:`~consumers.evaluator.loop.Evaluator`
over the app's tables, run until stopped (a budget store or broker that does not answer: wait,
then retry or resync). Leaves out deciding (``loop``) and the command line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Set
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry

from consumers.evaluator.loop import Evaluator, Input, table_specs
from consumers.evaluator.metrics import EvaluatorMetrics, evaluator_metrics, lag_reporter
from pipeline.clock import Clock, SystemClock
from pipeline.config.budgets import DEFAULT_CAPS
from pipeline.crypto import KeyEncryptionKeys
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import NO_CEILINGS, BudgetCaps, BudgetCeilings
from pipeline.rules.errors import BudgetStoreError
from pipeline.runtime.app import GroupProtocol, InputRecord, ProcessContext, StreamApp
from pipeline.runtime.processing import Message
from pipeline.runtime.recovery import run_steps

__all__ = ["EvaluatorDeps", "EvaluatorSettings", "EvaluatorStage"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EvaluatorSettings:
    """Where the evaluator runs (the broker, topics, the member's stable identity) and the
    rules' knobs: plain values."""

    bootstrap: str
    topology: Topology
    instance_id: str
    group_id: str = ""
    commit_interval_ms: int = 100
    static_membership: bool = False  # a restart with the same instance id keeps its partitions
    consumer_overrides: dict[str, Any] = field(default_factory=dict)
    # consumer (KIP-848): rebalances move and restore only what moves; classic works everywhere
    group_protocol: GroupProtocol = GroupProtocol.CLASSIC
    default_caps: BudgetCaps = DEFAULT_CAPS  # caps for watchers that leave some out
    ceilings: BudgetCeilings = NO_CEILINGS  # the most any window may allow
    evaluators: Set[str] = frozenset()  # the pinned evaluators registered here
    key_cache: int = 65_536  # data keys the ring keeps open

    @property
    def group(self) -> str:
        return self.group_id or f"{self.topology.prefix}evaluator"


@dataclass(frozen=True, slots=True)
class EvaluatorDeps:
    """The evaluator's collaborators. ``keks`` default to ``$VIGIL_MASTER_KEYS`` (none there:
    a ``ConfigError``)."""

    budgets: RedisBudgets
    keks: KeyEncryptionKeys = field(default_factory=KeyEncryptionKeys.load)
    clock: Clock = field(default_factory=SystemClock)
    codec: AvroCodec = field(default_factory=default_codec)
    metrics_registry: CollectorRegistry = REGISTRY


class EvaluatorStage:
    """One evaluator member: its stream app, then the :class:`Evaluator` over the app's tables
    as its processor. No network until :meth:`run` (or :meth:`start`)."""

    def __init__(self, settings: EvaluatorSettings, deps: EvaluatorDeps) -> None:
        self.settings = settings
        metrics = evaluator_metrics(deps.metrics_registry)
        self.app = self._stream_app(settings, deps, metrics)
        self.evaluator = Evaluator(
            settings.topology,
            deps.budgets,
            settings.default_caps,
            self.app.tables,
            clock=deps.clock,
            codec=deps.codec,
            evaluators=settings.evaluators,
            metrics=metrics,
            ceilings=settings.ceilings,
            keks=deps.keks,
            key_cache=settings.key_cache,
        )

    def _stream_app(
        self, settings: EvaluatorSettings, deps: EvaluatorDeps, metrics: EvaluatorMetrics
    ) -> StreamApp:
        """Events and ticks in; receipts, outbox entries and close commands out."""
        topology = settings.topology
        inputs = [topology.name(Topic.EVENTS), topology.name(Topic.TICKS)]
        overrides: dict[str, Any] = {
            "statistics.interval.ms": 5000,
            "stats_cb": lag_reporter(metrics, set(inputs)),
            **settings.consumer_overrides,
        }
        return StreamApp(
            settings.bootstrap,
            settings.group,
            settings.instance_id,
            inputs,
            self._process,
            tables=table_specs(topology),
            decode=self._decode,
            dead_letter_topic=topology.name(Topic.DEAD_LETTER),
            commit_interval_ms=settings.commit_interval_ms,
            static_membership=settings.static_membership,
            consumer_overrides=overrides,
            group_protocol=settings.group_protocol,
            metrics_registry=deps.metrics_registry,
            schemas_topic=topology.name(Topic.SCHEMAS),
            codec=deps.codec,
            outputs=[topology.name(t) for t in (Topic.RECEIPTS, Topic.OUTBOX, Topic.COMMANDS)],
        )

    def _decode(self, msg: Message) -> Input:
        return self.evaluator.decode(msg)

    def _process(self, batch: list[InputRecord], ctx: ProcessContext) -> None:
        self.evaluator(batch, ctx)

    def start(self) -> None:
        self.app.start()

    def prepare(self, compile_definitions: bool = False) -> int:
        """Index what the app holds now before the first batch (``Evaluator.prepare``)."""
        return self.evaluator.prepare(compile_definitions)

    def run(self, stop: threading.Event) -> None:
        """Step until ``stop``; then commit and leave the group.

        A budget store that does not answer aborts the batch (the runtime rewinds to the
        committed offsets); a broker that does not answer leaves the member to resync. Either
        way this loop waits, doubling up to a few seconds, and tries again."""
        metrics = self.evaluator.metrics

        def failed(exc: Exception, wait: float) -> None:
            if isinstance(exc, BudgetStoreError):
                metrics.budget_store_down.inc()
                log.warning("budget store unavailable, retrying in %.1fs: %s", wait, exc)
            else:
                log.warning("broker unavailable, resyncing in %.1fs: %s", wait, exc)

        app = self.app
        try:
            run_steps(
                app, app.step, stop, start=app.start, also=(BudgetStoreError,), on_failure=failed
            )
        finally:
            app.close()
