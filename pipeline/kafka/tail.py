"""A reply channel: one partition followed from its end (the command results a client waits for).

Owns :class:`Tail`. Finding a partition's end rides out a leader move (a new topic, a broker
lost or restarted) until the caller's deadline (``pipeline.kafka.failover``), refreshing the
client's metadata between tries so a moved leader is found; past the deadline the error names
the partition and its condition.

Leaves out what the records mean (``pipeline.control.client``).
"""

from __future__ import annotations

import time
from typing import Final

import confluent_kafka
from confluent_kafka import KafkaException, Message

from pipeline.kafka.clients import ready_batch, table_consumer
from pipeline.kafka.failover import partition_condition, ride_out
from pipeline.kafka.failures import BrokerFailure, translate

__all__ = ["Tail"]

_ASK_S: Final = 2.0  # one watermark request; a leader move is waited out by asking again


class Tail:
    """Follows one partition from its end at the time of :meth:`follow`: a reply channel (the
    command results a client waits for). No network until :meth:`follow`."""

    def __init__(self, bootstrap: str, name: str, timeout_s: float) -> None:
        self._bootstrap = bootstrap
        self._name = name
        self._timeout_s = timeout_s
        self._consumer: confluent_kafka.Consumer | None = None

    def follow(
        self, topic: str, partition: int, offset: int | None = None, *, wait_s: float | None = None
    ) -> int:
        """Read ``topic[partition]`` from ``offset``, or from its current end, found within
        ``wait_s`` (default: the tail's timeout); returns where reading starts (follow from it
        again to read the same records again)."""
        if self._consumer is None:
            # A short fetch wait: the broker answers a connection's requests in order, so a
            # fetch held for the default 500 ms would hold the next follow()'s offset query too.
            self._consumer = table_consumer(
                self._bootstrap,
                self._name,
                **{"enable.partition.eof": False, "fetch.wait.max.ms": 10},
            )
        if offset is None:
            offset = self._end(topic, partition, self._timeout_s if wait_s is None else wait_s)
        self._consumer.assign([confluent_kafka.TopicPartition(topic, partition, offset)])
        return offset

    def _end(self, topic: str, partition: int, wait_s: float) -> int:
        """The partition's end offset; a leader move (a new topic, a broker lost) answers "not
        leader" or nothing for a while: metadata is refreshed and the question asked again."""
        consumer = self._consumer
        assert consumer is not None
        tp = confluent_kafka.TopicPartition(topic, partition)
        deadline = time.monotonic() + wait_s
        asked = 0

        def ask() -> int:
            nonlocal asked
            asked += 1
            if asked > 1:  # what moved: the client learns the new leader from fresh metadata
                consumer.list_topics(topic, timeout=_ASK_S)
            left = max(0.1, min(_ASK_S, deadline - time.monotonic()))
            return int(consumer.get_watermark_offsets(tp, timeout=left)[1])

        what = f"find the end of {topic}[{partition}]"
        try:
            return ride_out(ask, what, deadline)
        except BrokerFailure as exc:
            said = str(exc).removesuffix(f" [{exc.code}, {exc.kind.value}]")
            raise BrokerFailure(
                f"{said} after {wait_s:g}s; {self._condition(topic, partition)}",
                code=exc.code,
                kind=exc.kind,
            ) from exc

    def _condition(self, topic: str, partition: int) -> str:
        assert self._consumer is not None
        try:
            return partition_condition(
                self._consumer.list_topics(topic, timeout=_ASK_S), topic, partition
            )
        except KafkaException:
            return "the cluster does not answer"

    def poll(self, timeout_s: float) -> list[Message]:
        """The records that arrived (errors skipped: a reply channel reads only records)."""
        assert self._consumer is not None, "follow() a partition first"
        try:
            batch = ready_batch(self._consumer, 100, timeout_s)
        except KafkaException as exc:
            raise translate(exc, "read a reply channel") from exc
        return [msg for msg in batch if msg.error() is None]

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
