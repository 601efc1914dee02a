"""Prometheus metrics of the evaluator (DESIGN.md §6), registered once per registry.

Owns: evaluations by outcome and reason, outbox entries, budget suppressions, re-routed events
(foreign producers), skipped inputs by cause, budget-store outages and consumer lag per input
partition (from librdkafka's statistics). Records consumed per topic and transaction commit
latency are the stream runtime's (``vigil_runtime_*``). Serving them is ``pipeline.cli``'s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from pipeline.runtime.metrics import per_registry

__all__ = ["EvaluatorMetrics", "evaluator_metrics", "lag_reporter"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EvaluatorMetrics:
    evaluations: Counter  # labels: outcome, reason
    outbox_entries: Counter
    budget_suppressions: Counter
    rerouted: Counter  # labels: topic
    skipped: Counter  # labels: cause
    budget_store_down: Counter
    close_commands: Counter  # labels: reason
    consumer_lag: Gauge  # labels: topic, partition


def evaluator_metrics(metrics_registry: CollectorRegistry = REGISTRY) -> EvaluatorMetrics:
    """The evaluator's metrics in ``metrics_registry``, created on first use."""
    return _made(metrics_registry)


def _create(metrics_registry: CollectorRegistry) -> EvaluatorMetrics:
    return EvaluatorMetrics(
        evaluations=Counter(
            "vigil_evaluator_evaluations",
            "Evaluations by outcome and reason code (docs/reason-codes.md).",
            ["outcome", "reason"],
            registry=metrics_registry,
        ),
        outbox_entries=Counter(
            "vigil_evaluator_outbox_entries", "Outbox entries written.", registry=metrics_registry
        ),
        budget_suppressions=Counter(
            "vigil_evaluator_budget_suppressions",
            "Evaluations refused by an exhausted evaluation budget.",
            registry=metrics_registry,
        ),
        rerouted=Counter(
            "vigil_evaluator_rerouted",
            "Input records found off their key's Java-default partition (a foreign producer) "
            "and re-produced to it.",
            ["topic"],
            registry=metrics_registry,
        ),
        skipped=Counter(
            "vigil_evaluator_skipped",
            "Inputs or watchers not evaluated, by cause.",
            ["cause"],
            registry=metrics_registry,
        ),
        budget_store_down=Counter(
            "vigil_evaluator_budget_store_unavailable",
            "Batches aborted and retried because the budget store (Redis) did not answer.",
            registry=metrics_registry,
        ),
        close_commands=Counter(
            "vigil_evaluator_close_commands",
            "close commands emitted to the command processor, by reason.",
            ["reason"],
            registry=metrics_registry,
        ),
        consumer_lag=Gauge(
            "vigil_evaluator_consumer_lag",
            "Records between the consumer's position and the last stable offset, per input "
            "partition (from librdkafka statistics every 5 s).",
            ["topic", "partition"],
            registry=metrics_registry,
        ),
    )


def lag_reporter(metrics: EvaluatorMetrics, topics: set[str]) -> Callable[[str], None]:
    """A librdkafka ``stats_cb`` that sets the lag gauge of each assigned input partition."""

    def report(stats_json: str) -> None:
        try:
            stats = json.loads(stats_json)
            for topic, body in stats.get("topics", {}).items():
                if topic not in topics:
                    continue
                for number, partition in body.get("partitions", {}).items():
                    # Offsets are committed through the producer's transactions, which
                    # librdkafka's own consumer_lag never sees: measure from the position.
                    end, at = partition.get("ls_offset", -1), partition.get("app_offset", -1)
                    if int(number) >= 0 and end >= 0 and at >= 0:
                        metrics.consumer_lag.labels(topic, number).set(max(0, end - at))
        except (ValueError, TypeError, AttributeError) as exc:
            log.debug("unreadable librdkafka statistics: %s", exc)

    return report


_made = per_registry(_create)
