"""Leader moves are waits bounded by the caller's deadline (pipeline.kafka.failover)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipeline.kafka.failover import (
    partition_condition,
    ride_out,
    topic_metadata,
    unsettled_partitions,
)
from pipeline.kafka.failures import BrokerFailure, ErrorKind

pytestmark = pytest.mark.unit


def _failing(codes: list[int], answer: Any = "ok") -> Any:
    """A call that raises a KafkaException of each code in turn, then answers."""
    left = list(codes)

    def call() -> Any:
        if left:
            raise KafkaException(KafkaError(left.pop(0)))
        return answer

    return call


def test_a_leader_move_is_asked_again_until_it_passes() -> None:
    call = _failing([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE])
    assert ride_out(call, "x", time.monotonic() + 10) == "ok"


def test_a_permanent_failure_is_raised_at_once() -> None:
    call = _failing([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    started = time.monotonic()
    with pytest.raises(BrokerFailure) as raised:
        ride_out(call, "reading", time.monotonic() + 10)
    assert raised.value.kind is ErrorKind.PERMANENT and time.monotonic() - started < 1


def test_past_the_deadline_the_last_failure_names_what_was_asked() -> None:
    call = _failing([KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    with pytest.raises(BrokerFailure, match=r"^find the end of t\[3\]: .*NOT_LEADER"):
        ride_out(call, "find the end of t[3]", time.monotonic() + 0.3)


def test_a_future_that_does_not_answer_is_retried_then_named() -> None:
    def call() -> Any:
        raise TimeoutError

    with pytest.raises(BrokerFailure, match="no answer from the cluster"):
        ride_out(call, "describing", time.monotonic() + 0.2)


@dataclass
class Partition:
    id: int
    leader: int
    replicas: list[int]
    isrs: list[int]


@dataclass
class TopicMeta:
    partitions: dict[int, Partition] = field(default_factory=dict)
    error: KafkaError | None = None


@dataclass
class Metadata:
    topics: dict[str, TopicMeta]


def test_unsettled_partitions_are_those_without_leader_or_short_of_replicas() -> None:
    metadata = Metadata(
        {
            "t": TopicMeta(
                {
                    0: Partition(0, 1, [1, 2, 3], [1, 2, 3]),
                    1: Partition(1, -1, [1, 2, 3], [2]),
                    2: Partition(2, 2, [1, 2, 3], [2, 3]),
                }
            )
        }
    )
    assert unsettled_partitions(metadata, ["t"]) == [
        "t[1]: no leader, replicas 1,2,3, in sync 2",
        "t[2]: leader broker 2, replicas 1,2,3, in sync 2,3",
    ]
    assert partition_condition(metadata, "t", 9) == "t[9]: no such partition"
    assert unsettled_partitions(metadata, ["gone"]) == ["gone: unknown topic"]


def test_topic_metadata_waits_out_a_moving_leader_and_says_none_when_missing() -> None:
    moving = TopicMeta(error=KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
    settled = TopicMeta({0: Partition(0, 1, [1], [1])})
    answers = [Metadata({"t": moving}), Metadata({"t": settled})]
    found = topic_metadata(lambda _: answers.pop(0), "t", time.monotonic() + 10)
    assert found is settled
    unknown = TopicMeta(error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert topic_metadata(lambda _: Metadata({"t": unknown}), "t", time.monotonic() + 10) is None
    assert topic_metadata(lambda _: Metadata({}), "t", time.monotonic() + 10) is None
