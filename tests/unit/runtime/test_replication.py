"""A resync that waits on partitions short of in-sync replicas says so: a gauge and one log
line naming them (pipeline.runtime.replication)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry

from pipeline.runtime.metrics import runtime_metrics
from pipeline.runtime.replication import ReplicationWatch
from tests.unit.kafka.test_failover import Metadata, Partition, TopicMeta

pytestmark = pytest.mark.unit


@dataclass
class _Producer:
    metadata: Any

    def list_topics(self, timeout: float) -> Any:
        if isinstance(self.metadata, Exception):
            raise self.metadata
        return self.metadata


@dataclass
class _Member:
    producer: _Producer
    group_id: str = "g"
    instance_id: str = "i-1"


def _cluster(in_sync: list[int]) -> Metadata:
    return Metadata(
        {
            "vigil.outbox": TopicMeta(
                {0: Partition(0, 1, [1, 2, 3], [1, 2, 3]), 1: Partition(1, 2, [1, 2, 3], in_sync)}
            ),
            "other": TopicMeta({0: Partition(0, 1, [1, 2, 3], [1])}),  # not the member's
        }
    )


def test_short_partitions_are_a_gauge_and_one_line_per_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    member = _Member(_Producer(_cluster([2])))
    watch = ReplicationWatch(member, ["vigil.outbox"], runtime_metrics(registry))  # type: ignore[arg-type]
    gauge = "vigil_runtime_under_replicated_partitions"

    with caplog.at_level(logging.WARNING, "pipeline.runtime.replication"):
        assert watch.look() == ["vigil.outbox[1]: leader broker 2, replicas 1,2,3, in sync 2"]
        watch.look()  # the same wait: no second line
        member.producer.metadata = KafkaException(KafkaError(KafkaError._TRANSPORT))
        assert watch.look() == watch.short  # unread: unchanged, nothing logged
        assert registry.get_sample_value(gauge, {"group": "g"}) == 1
        member.producer.metadata = _cluster([1, 2, 3])
        assert watch.look() == []

    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "g/i-1 waits on 1 partition(s)" in lines[0] and "vigil.outbox[1]" in lines[0]
    assert "other" not in lines[0]
    assert "back in sync" in lines[1]
    assert registry.get_sample_value(gauge, {"group": "g"}) == 0
