"""The evaluator stage: one member of the evaluator group, built with no network, then run.

Owns :class:`EvaluatorSettings` (the broker, topics and the member's stable identity) and
:class:`EvaluatorStage`: the :class:`~consumers.evaluator.loop.Evaluator` it is given, wired
into a :class:`~pipeline.runtime.app.StreamApp` over ``events`` and ``ticks`` with the
evaluator's tables, then :meth:`EvaluatorStage.run` until stopped — a budget store that does
not answer aborts the batch and waits, a broker that does not answer resyncs
(``pipeline.runtime.recovery``). Leaves out deciding (``loop``) and the command line.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry

from consumers.evaluator.loop import Evaluator, table_specs
from consumers.evaluator.metrics import lag_reporter
from pipeline.kafka.topics import Topic, Topology
from pipeline.rules.errors import BudgetStoreError
from pipeline.runtime.app import GroupProtocol, StreamApp
from pipeline.runtime.recovery import run_steps

__all__ = ["EvaluatorSettings", "EvaluatorStage"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EvaluatorSettings:
    """Where the evaluator runs: the broker, the topics and the member's stable identity."""

    bootstrap: str
    topology: Topology
    instance_id: str
    group_id: str = ""
    commit_interval_ms: int = 100
    static_membership: bool = False  # a restart with the same instance id keeps its partitions
    consumer_overrides: dict[str, Any] = field(default_factory=dict)
    # consumer (KIP-848): rebalances move and restore only what moves; classic works everywhere
    group_protocol: GroupProtocol = GroupProtocol.CLASSIC

    @property
    def group(self) -> str:
        return self.group_id or f"{self.topology.prefix}evaluator"


class EvaluatorStage:
    """One evaluator member: ``evaluator`` as the processor of its stream app. No network
    until :meth:`run` (or :meth:`start`)."""

    def __init__(
        self,
        settings: EvaluatorSettings,
        evaluator: Evaluator,
        *,
        metrics_registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.settings = settings
        self.evaluator = evaluator
        topology = settings.topology
        inputs = [topology.name(Topic.EVENTS), topology.name(Topic.TICKS)]
        overrides: dict[str, Any] = {
            "statistics.interval.ms": 5000,
            "stats_cb": lag_reporter(evaluator.metrics, set(inputs)),
            **settings.consumer_overrides,
        }
        self.app = StreamApp(
            settings.bootstrap,
            settings.group,
            settings.instance_id,
            inputs,
            evaluator,
            tables=table_specs(topology),
            decode=evaluator.decode,
            dead_letter_topic=topology.name(Topic.DEAD_LETTER),
            commit_interval_ms=settings.commit_interval_ms,
            static_membership=settings.static_membership,
            consumer_overrides=overrides,
            group_protocol=settings.group_protocol,
            metrics_registry=metrics_registry,
            schemas_topic=topology.name(Topic.SCHEMAS),
            codec=evaluator.codec,
        )
        evaluator.follow_keys(self.app.tables)

    def start(self) -> None:
        self.app.start()

    def prepare(self, compile_definitions: bool = False) -> int:
        """Index what the app holds now before the first batch (``Evaluator.prepare``)."""
        return self.evaluator.prepare(self.app.tables, compile_definitions)

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
