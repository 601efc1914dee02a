"""Consumer-group lag, as the broker sees it: committed offsets against read-committed ends.

Owns :func:`group_lag`, asked of the group coordinator for every partition of a group's inputs
(librdkafka's ``consumer_lag`` never sees offsets committed through transactions); a partition
never committed counts from its earliest retained offset. Leaves out what lag means for
readiness (``pipeline.ops.health``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from pipeline.kafka.clients import translate

__all__ = ["group_lag"]

_NO_OFFSET: Final = 0  # a committed offset below this means "never committed"


def group_lag(
    admin: AdminClient, group: str, partitions: Iterable[tuple[str, int]], timeout_s: float = 5.0
) -> dict[tuple[str, int], int]:
    """Records between ``group``'s committed offset and the end, per ``(topic, partition)``."""
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    try:
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in wanted])]
        futures = admin.list_consumer_group_offsets(request, request_timeout=timeout_s)
        committed = {
            (tp.topic, tp.partition): tp.offset
            for future in futures.values()
            for tp in future.result(timeout=timeout_s).topic_partitions
        }
        ends = _offsets(admin, wanted, OffsetSpec.latest(), timeout_s)  # type: ignore[no-untyped-call]
        starts = _offsets(admin, wanted, OffsetSpec.earliest(), timeout_s)  # type: ignore[no-untyped-call]
    except KafkaException as exc:
        raise translate(exc, f"measure the lag of {group}") from exc
    lag = {}
    for key in wanted:
        at = committed.get(key, -1)
        start = starts.get(key, 0)
        lag[key] = max(0, ends.get(key, 0) - (at if at >= _NO_OFFSET else start))
    return lag


def _offsets(
    admin: AdminClient, partitions: list[tuple[str, int]], spec: Any, timeout_s: float
) -> dict[tuple[str, int], int]:
    futures = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in partitions},
        isolation_level=IsolationLevel.READ_COMMITTED,
        request_timeout=timeout_s,
    )
    return {
        (tp.topic, tp.partition): int(future.result(timeout=timeout_s).offset)
        for tp, future in futures.items()
    }
