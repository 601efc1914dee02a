"""Consumer groups as an operator sees them: members, state and lag (the console's header).

Owns :func:`group_status`: per group its members, state and lag (last stable offset − committed,
over the partitions it committed) in a handful of admin requests; an unknown group has none, a
broker that does not answer is a :class:`~pipeline.rules.errors.BrokerError`. Leaves out which
groups vigil runs (the caller names them) and what is shown (``pipeline.control``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from pipeline.kafka.failures import answer

__all__ = ["GroupStatus", "group_status"]

_TIMEOUT_S: Final = 3.0
_LATEST: Final = OffsetSpec.latest()  # type: ignore[no-untyped-call]


@dataclass(frozen=True, slots=True)
class GroupStatus:
    group: str
    members: int
    state: str
    lag: int


def group_status(admin: AdminClient, groups: Sequence[str]) -> list[GroupStatus]:
    """Members, state and read-committed lag of each of ``groups``, in order."""
    if not groups:
        return []
    described = admin.describe_consumer_groups(list(groups), request_timeout=_TIMEOUT_S)
    committed: dict[str, list[TopicPartition]] = {}
    for group in groups:
        request = [ConsumerGroupTopicPartitions(group)]
        (future,) = admin.list_consumer_group_offsets(request, request_timeout=_TIMEOUT_S).values()
        offsets = answer(future, f"offsets of group {group}", _TIMEOUT_S)
        committed[group] = [tp for tp in offsets.topic_partitions or [] if tp.offset >= 0]
    partitions = {
        TopicPartition(tp.topic, tp.partition) for tps in committed.values() for tp in tps
    }
    ends: dict[tuple[str, int], int] = {}
    if partitions:
        asked = admin.list_offsets(
            {tp: _LATEST for tp in partitions},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=_TIMEOUT_S,
        )
        for tp, future in asked.items():
            ends[(tp.topic, tp.partition)] = int(answer(future, "end offsets", _TIMEOUT_S).offset)
    out = []
    for group in groups:
        description = answer(described[group], f"group {group}", _TIMEOUT_S)
        lag = sum(
            max(0, ends.get((tp.topic, tp.partition), tp.offset) - tp.offset)
            for tp in committed[group]
        )
        state = getattr(description.state, "name", str(description.state)).lower()
        out.append(GroupStatus(group, len(description.members or []), state, lag))
    return out
