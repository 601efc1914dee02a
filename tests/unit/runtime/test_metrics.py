"""The runtime's metrics are made once per registry, and only ever for that registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from pipeline.runtime.metrics import runtime_metrics

pytestmark = pytest.mark.unit


def test_a_registry_made_after_another_was_freed_counts_in_itself() -> None:
    for _ in range(20):  # CPython hands a freed registry's memory (and id) to the next one
        runtime_metrics(CollectorRegistry())
        registry = CollectorRegistry()
        runtime_metrics(registry).consumed.labels("g", "t").inc(3)
        labels = {"group": "g", "topic": "t"}
        assert registry.get_sample_value("vigil_runtime_records_consumed_total", labels) == 3


def test_one_registry_gets_the_same_metrics_every_time() -> None:
    registry = CollectorRegistry()
    assert runtime_metrics(registry) is runtime_metrics(registry)
