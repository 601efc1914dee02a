"""Leader and coordinator moves as waits bounded by the caller's deadline (DESIGN §10 "Replicated
safely"): the one retry rule every client path outside the stream runtime uses.

Owns :data:`FAILOVER_WAIT_S` (longer than a session timeout plus a controller election),
:func:`ride_out`, :func:`partition_condition` and :func:`unsettled_partitions`. Leaves out
classifying errors (``failures``) and the stream runtime's own resync (``pipeline.runtime``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

from confluent_kafka import KafkaError, KafkaException

from pipeline.kafka.failures import BrokerFailure, ErrorKind, translate

__all__ = [
    "FAILOVER_WAIT_S",
    "partition_condition",
    "ride_out",
    "topic_metadata",
    "unsettled_partitions",
]

# A killed broker is fenced after broker.session.timeout.ms (9 s by default), its partitions'
# leadership moves then; a controller failover adds an election. A minute covers both on a
# loaded machine with room to spare, and is still a wait a person at a terminal accepts.
FAILOVER_WAIT_S: Final = 60.0
_FIRST_PAUSE_S: Final = 0.1
_LONGEST_PAUSE_S: Final = 1.0

T = TypeVar("T")


def ride_out(call: Callable[[], T], what: str, deadline: float) -> T:
    """``call()``, again while it fails retriably (a leader or coordinator moving, a broker
    away), until ``deadline`` (``time.monotonic()``); then its last failure as a
    :class:`BrokerFailure` naming ``what``. Other failures are raised at once."""
    pause = _FIRST_PAUSE_S
    while True:
        try:
            return call()
        except KafkaException as exc:
            failure = translate(exc, what)
            if failure.kind is not ErrorKind.RETRIABLE or time.monotonic() + pause > deadline:
                raise failure from exc
        except BrokerFailure as exc:
            if exc.kind is not ErrorKind.RETRIABLE or time.monotonic() + pause > deadline:
                raise
        except TimeoutError as exc:  # a future's wait (admin requests)
            if time.monotonic() + pause > deadline:
                raise BrokerFailure(
                    f"{what}: no answer from the cluster",
                    code="_TIMED_OUT",
                    kind=ErrorKind.RETRIABLE,
                ) from exc
        time.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE_S)


def topic_metadata(metadata_of: Callable[[str], Any], name: str, deadline: float) -> Any | None:
    """Topic ``name``'s metadata from ``metadata_of(name)`` (a client's ``list_topics``),
    asked again while the topic reports an error other than "unknown" (a leader moving) until
    ``deadline``; None when the cluster does not know the topic (it is missing)."""

    def ask() -> Any:
        found = metadata_of(name).topics.get(name)
        error = None if found is None else found.error
        if error is not None and error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise KafkaException(error)  # retriable: asked again
        return found

    found = ride_out(ask, f"reading the metadata of {name}", deadline)
    return None if found is None or found.error is not None else found


def partition_condition(metadata: Any, topic: str, partition: int) -> str:
    """``topic[partition]``'s state in words from a client's cluster metadata: its leader (or
    none), its replicas and which of them are in sync."""
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        error = "unknown topic" if found is None else found.error.str()
        return f"{topic}[{partition}]: {error}"
    meta = found.partitions.get(partition)
    if meta is None:
        return f"{topic}[{partition}]: no such partition"
    leader = f"leader broker {meta.leader}" if meta.leader >= 0 else "no leader"
    replicas = ",".join(str(r) for r in meta.replicas)
    in_sync = ",".join(str(r) for r in meta.isrs) or "none"
    return f"{topic}[{partition}]: {leader}, replicas {replicas}, in sync {in_sync}"


def unsettled_partitions(metadata: Any, topics: list[str]) -> list[str]:
    """:func:`partition_condition` of each partition of ``topics`` that has no leader or fewer
    in-sync replicas than replicas (a broker lost, not yet back in sync)."""
    lines = []
    for topic in topics:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            lines.append(partition_condition(metadata, topic, 0).replace("[0]", ""))
            continue
        for partition, meta in sorted(found.partitions.items()):
            if meta.leader < 0 or len(meta.isrs) < len(meta.replicas):
                lines.append(partition_condition(metadata, topic, partition))
    return lines
