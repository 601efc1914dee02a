"""Prometheus metrics of the stream runtime, registered once per registry.

Owns the metric names and labels; the runtime updates them per batch, never per record, so the
hot loop pays one call per topic per batch. Leaves out serving them (``pipeline/cli``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["RuntimeMetrics", "per_registry", "runtime_metrics"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RuntimeMetrics:
    consumed: Counter  # labels: group, topic
    transactions: Counter  # labels: group, result (committed | aborted)
    commit_seconds: Histogram  # labels: group
    rebalances: Counter  # labels: group, event (assigned | revoked | lost)
    dead_letters: Counter  # labels: group, topic, cause
    unknown_schema: Counter  # labels: group, topic
    paused_partitions: Gauge  # labels: group
    resyncs: Counter  # labels: group
    under_replicated: Gauge  # labels: group
    consumer_replacements: Counter  # labels: group
    restored_partitions: Counter  # labels: group
    group_protocol: Gauge  # labels: group, protocol (classic | consumer): 1 for the one in use
    batches_cut: Counter  # labels: group


def runtime_metrics(metrics_registry: CollectorRegistry = REGISTRY) -> RuntimeMetrics:
    """The runtime's metrics in ``metrics_registry``, made on first use (apps share them)."""
    return _made(metrics_registry)


def _create(metrics_registry: CollectorRegistry) -> RuntimeMetrics:
    return RuntimeMetrics(**_flow(metrics_registry), **_health(metrics_registry))


def _flow(metrics_registry: CollectorRegistry) -> dict[str, Any]:
    """What passes through: records, transactions, commits, rebalances, dead letters."""
    return dict(
        consumed=Counter(
            "vigil_runtime_records_consumed",
            "Input records handed to the processor or dead-lettered.",
            ["group", "topic"],
            registry=metrics_registry,
        ),
        transactions=Counter(
            "vigil_runtime_transactions",
            "Transactions ended, by result.",
            ["group", "result"],
            registry=metrics_registry,
        ),
        commit_seconds=Histogram(
            "vigil_runtime_commit_seconds",
            "Time to send offsets and commit one transaction.",
            ["group"],
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0),
            registry=metrics_registry,
        ),
        rebalances=Counter(
            "vigil_runtime_rebalances",
            "Partition assignment events.",
            ["group", "event"],
            registry=metrics_registry,
        ),
        dead_letters=Counter(
            "vigil_runtime_dead_letters",
            "Input records sent to the dead-letter topic, by cause: undecodable, "
            "unregistered_schema (garbage), processing_failed.",
            ["group", "topic", "cause"],
            registry=metrics_registry,
        ),
    )


def _health(metrics_registry: CollectorRegistry) -> dict[str, Any]:
    """What needs an operator's eye: pauses, resyncs, replaced consumers, restores, cuts."""
    return dict(
        unknown_schema=Counter(
            "vigil_runtime_unknown_schema",
            "Records with a schema fingerprint this build does not know (partition paused).",
            ["group", "topic"],
            registry=metrics_registry,
        ),
        paused_partitions=Gauge(
            "vigil_runtime_paused_partitions",
            "Input partitions paused on an unknown schema: alert when above zero.",
            ["group"],
            registry=metrics_registry,
        ),
        resyncs=Counter(
            "vigil_runtime_resyncs",
            "Resyncs after a broker failure left a transaction's outcome unknown (producer "
            "rebuilt, tables restored, inputs rewound).",
            ["group"],
            registry=metrics_registry,
        ),
        under_replicated=Gauge(
            "vigil_runtime_under_replicated_partitions",
            "Partitions of the topics this member uses short of in-sync replicas or of a "
            "leader, as its last resync saw them: its writes wait for them (the log names "
            "them).",
            ["group"],
            registry=metrics_registry,
        ),
        consumer_replacements=Counter(
            "vigil_runtime_consumer_replacements",
            "Consumers replaced because their group stopped answering while the broker did "
            "(partitions given up and taken again through a new join).",
            ["group"],
            registry=metrics_registry,
        ),
        restored_partitions=Counter(
            "vigil_runtime_restored_partitions",
            "Partition numbers whose tables a rebalance restored from their changelogs.",
            ["group"],
            registry=metrics_registry,
        ),
        group_protocol=Gauge(
            "vigil_runtime_group_protocol",
            "The consumer group protocol this member runs (1): classic or consumer (KIP-848).",
            ["group", "protocol"],
            registry=metrics_registry,
        ),
        batches_cut=Counter(
            "vigil_runtime_batches_cut",
            "Batches cut short to commit within the transaction timeout (the rest read again "
            "by the next step): frequent cuts mean records that are slow to process.",
            ["group"],
            registry=metrics_registry,
        ),
    )


def per_registry(create: Callable[[CollectorRegistry], T]) -> Callable[[CollectorRegistry], T]:
    """``create`` run once per registry, then its result reused: prometheus refuses a second
    registration of a name, and tests build many apps and workers on one registry. Held by the
    registry itself (weakly), never by its ``id``: a registry made after another was freed can
    take its id, and would be handed metrics registered in the dead one."""
    lock = threading.Lock()
    made: weakref.WeakKeyDictionary[CollectorRegistry, T] = weakref.WeakKeyDictionary()

    def get(metrics_registry: CollectorRegistry = REGISTRY) -> T:
        with lock:
            found = made.get(metrics_registry)
            if found is None:
                found = made[metrics_registry] = create(metrics_registry)
            return found

    return get


_made = per_registry(_create)
