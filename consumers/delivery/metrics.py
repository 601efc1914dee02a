"""Prometheus metrics of the delivery consumer, registered once per registry.

Owns the names and labels (DESIGN.md §6, issue 6): deliveries by result and adapter, attempts,
retries scheduled, deferrals by reason, dead letters and suppressions by reason, cancellations,
purges, in-flight sends, chat sends at risk of repeating, and the end-to-end latency from
evidence time to delivered. Leaves out serving them (``pipeline.cli.delivery_cmd``) and the
runtime's own metrics (``pipeline.runtime.metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from pipeline.runtime.metrics import per_registry

__all__ = ["DeliveryMetrics", "delivery_metrics"]


@dataclass(frozen=True, slots=True)
class DeliveryMetrics:
    deliveries: Counter  # labels: result (delivered | an error code), adapter
    attempts: Counter  # labels: adapter
    retries: Counter  # labels: error
    deferrals: Counter  # labels: reason
    dead_letters: Counter  # labels: reason
    suppressions: Counter  # labels: reason
    cancellations: Counter
    redeliveries: Counter  # labels: result (applied | ignored)
    purges: Counter
    in_flight: Gauge
    repeat_risk: Counter  # labels: adapter
    end_to_end: Histogram


def delivery_metrics(metrics_registry: CollectorRegistry = REGISTRY) -> DeliveryMetrics:
    """The delivery metrics in ``metrics_registry``, made on first use (many workers share them)."""
    return _made(metrics_registry)


def _create(metrics_registry: CollectorRegistry) -> DeliveryMetrics:
    return DeliveryMetrics(**_attempts(metrics_registry), **_settled(metrics_registry))


def _attempts(metrics_registry: CollectorRegistry) -> dict[str, Any]:
    """Sends and their answers: deliveries, attempts, retries, deferrals, dead letters."""
    return dict(
        deliveries=Counter(
            "vigil_delivery_results",
            "Delivery attempts ended, by result (delivered or a categorical error) and adapter.",
            ["result", "adapter"],
            registry=metrics_registry,
        ),
        attempts=Counter(
            "vigil_delivery_attempts",
            "Destinations called (claims persisted, then sent), by adapter.",
            ["adapter"],
            registry=metrics_registry,
        ),
        retries=Counter(
            "vigil_delivery_retries_scheduled",
            "Failed attempts that will be retried after the backoff, by error.",
            ["error"],
            registry=metrics_registry,
        ),
        deferrals=Counter(
            "vigil_delivery_deferrals",
            "Due entries deferred without an attempt, by reason.",
            ["reason"],
            registry=metrics_registry,
        ),
        dead_letters=Counter(
            "vigil_delivery_dead_letters",
            "Entries dead-lettered (retry ceiling or a terminal error), by error.",
            ["reason"],
            registry=metrics_registry,
        ),
    )


def _settled(metrics_registry: CollectorRegistry) -> dict[str, Any]:
    """What else settles an entry, what is in flight, and how long it all took."""
    return dict(
        suppressions=Counter(
            "vigil_delivery_suppressions",
            "Entries settled without sending, by reason.",
            ["reason"],
            registry=metrics_registry,
        ),
        redeliveries=Counter(
            "vigil_delivery_redeliveries",
            "Redeliver requests, by result: applied (pending again) or ignored.",
            ["result"],
            registry=metrics_registry,
        ),
        cancellations=Counter(
            "vigil_delivery_cancellations",
            "Undelivered entries dropped: cancelled watcher or erased subject.",
            registry=metrics_registry,
        ),
        purges=Counter(
            "vigil_delivery_purges",
            "Entries tombstoned on outbox and delivery-state.",
            registry=metrics_registry,
        ),
        in_flight=Gauge(
            "vigil_delivery_in_flight",
            "Claimed attempts whose destination has not answered yet.",
            registry=metrics_registry,
        ),
        repeat_risk=Counter(
            "vigil_delivery_repeat_risk_sends",
            "Sends to destinations without an idempotency key (a crash may repeat them).",
            ["adapter"],
            registry=metrics_registry,
        ),
        end_to_end=Histogram(
            "vigil_delivery_end_to_end_seconds",
            "From evidence time (or entry creation) to delivered.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
            registry=metrics_registry,
        ),
    )


_made = per_registry(_create)
