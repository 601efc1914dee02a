"""Prometheus metrics of the command processor: commands by verb and result.

Registered once per registry (tests run several processors in one process), through the
runtime's :func:`~pipeline.runtime.metrics.per_registry`. Leaves out serving them (``cli``) and
the runtime's own metrics (``pipeline.runtime.metrics``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from pipeline.runtime.metrics import per_registry

__all__ = ["command_counter"]


@per_registry
def command_counter(metrics_registry: CollectorRegistry) -> Counter:
    """``vigil_commands_total{verb, result}``: result is ``ok`` or the error code."""
    return Counter(
        "vigil_commands",
        "Commands decided by the command processor, by verb and result.",
        ["verb", "result"],
        registry=metrics_registry,
    )
