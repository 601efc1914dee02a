"""Prometheus metrics of the command processor: commands by verb and result.

Registered once per registry (tests run several processors in one process). Leaves out serving
them (``cli``) and the runtime's own metrics (``pipeline.runtime.metrics``).
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, CollectorRegistry, Counter

__all__ = ["command_counter"]

_lock = threading.Lock()
_by_registry: dict[int, Counter] = {}


def command_counter(registry: CollectorRegistry = REGISTRY) -> Counter:
    """``vigil_commands_total{verb, result}``: result is ``ok`` or the error code."""
    with _lock:
        found = _by_registry.get(id(registry))
        if found is None:
            found = Counter(
                "vigil_commands",
                "Commands decided by the command processor, by verb and result.",
                ["verb", "result"],
                registry=registry,
            )
            _by_registry[id(registry)] = found
        return found
