"""The poll ticker's Prometheus metrics: due instants, missed instants by policy, ticks written,
deferrals, watchers skipped, and the governed tools' latency and errors by code.

Owns the names and labels, created once per registry (a process may run several tickers in
tests). Leaves out serving them (``pipeline/cli``) and the runtime's own metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter

from pipeline.runtime.metrics import per_registry
from producers.ticker.tools.base import ToolMetrics

__all__ = ["TickerMetrics", "ticker_metrics"]


@dataclass(frozen=True, slots=True)
class TickerMetrics:
    due: Counter  # labels: kind (poll | schedule | expiry)
    missed: Counter  # labels: policy (skip | latest | bounded), fate (fired | dropped)
    guarded: (
        Counter  # labels: reason (authorization_denied | budget_exhausted | budget_unavailable)
    )
    skipped: Counter  # labels: cause (watcher_invalid)
    tools: ToolMetrics


def ticker_metrics(metrics_registry: CollectorRegistry = REGISTRY) -> TickerMetrics:
    """The ticker's metrics in ``metrics_registry``, created on first use."""
    return _made(metrics_registry)


def _create(metrics_registry: CollectorRegistry) -> TickerMetrics:
    return TickerMetrics(
        due=Counter(
            "vigil_ticker_due_instants",
            "Ticks written, by kind (poll, schedule, expiry).",
            ["kind"],
            registry=metrics_registry,
        ),
        missed=Counter(
            "vigil_ticker_missed_instants",
            "Instants due while nothing ran, by missed-run policy and fate (fired or dropped).",
            ["policy", "fate"],
            registry=metrics_registry,
        ),
        guarded=Counter(
            "vigil_ticker_tool_calls_withheld",
            "Tool calls not made: grant revoked, evaluation budget exhausted, or the budget "
            "store unavailable (the tick is deferred).",
            ["reason"],
            registry=metrics_registry,
        ),
        skipped=Counter(
            "vigil_ticker_watchers_skipped",
            "Watchers not ticked because planning them failed (an unreadable definition): "
            "the watcher is skipped and logged, the ticker goes on.",
            ["cause"],
            registry=metrics_registry,
        ),
        tools=ToolMetrics.create(metrics_registry),
    )


_made = per_registry(_create)
