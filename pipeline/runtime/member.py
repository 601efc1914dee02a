"""A stream app member's two clients: its transactional producer and its group consumer.

Owns :class:`Member`: start the producer (fencing older incarnations), join, replace a consumer
its group stopped answering, leave, and the group metadata every transaction sends. Leaves out
what a rebalance restores (``assignment``) and transactions (``transactions``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from pipeline.kafka.clients import retire, translate
from pipeline.rules.errors import BrokerError
from pipeline.runtime.metrics import RuntimeMetrics

__all__ = ["TIMEOUT_S", "Member", "Rebalance"]

log = logging.getLogger(__name__)

TIMEOUT_S = 30.0
_RETIRE_S = 10.0  # how long a replaced consumer may take to leave its group


class Rebalance(Protocol):
    """What a member's group changes are handed to (``assignment.Assignment``)."""

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None: ...

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None: ...

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None: ...

    def release_all(self) -> None: ...


class Member:
    """One transactional producer (``<group>-<instance>``) and one group consumer. No network
    until :meth:`start_producer` and :meth:`join`."""

    def __init__(
        self,
        group_id: str,
        instance_id: str,
        inputs: list[str],
        producer_config: dict[str, Any],
        consumer_config: dict[str, Any],
        metrics: RuntimeMetrics,
    ) -> None:
        self.group_id = group_id
        self.instance_id = instance_id
        self.inputs = inputs
        self._producer_config = producer_config
        self._consumer_config = consumer_config
        self._metrics = metrics
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._rebalance: Rebalance | None = None
        self._group_metadata: Any = None  # changes with every rebalance

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            raise BrokerError("the app is not started")
        return self._producer

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            raise BrokerError("the app is not started")
        return self._consumer

    @property
    def transaction_timeout_s(self) -> float:
        return int(self._producer_config["transaction.timeout.ms"]) / 1000

    @property
    def joined(self) -> bool:
        return self._consumer is not None

    def start_producer(self) -> None:
        """A new transactional producer (the old one, if any, is dropped unflushed): its
        ``init_transactions`` completes or aborts whatever an older one left open."""
        self._producer = None
        producer = Producer(self._producer_config)
        try:
            producer.init_transactions(TIMEOUT_S)
        except KafkaException as exc:
            raise translate(exc, "init transactions") from exc
        self._producer = producer

    def join(self, rebalance: Rebalance) -> None:
        """Join the group with a new consumer. Its callbacks act only while it is the member's
        consumer: one being retired (:meth:`replace_consumer`) gives its partitions up
        silently."""
        consumer = Consumer(self._consumer_config)

        def current(callback: Callable[[Consumer, list[TopicPartition]], None]) -> Any:
            def call(member: Consumer, partitions: list[TopicPartition]) -> None:
                if member is self._consumer:
                    callback(member, partitions)

            return call

        self._rebalance = rebalance
        self._consumer = consumer
        self._group_metadata = None
        consumer.subscribe(
            self.inputs,
            on_assign=current(rebalance.on_assign),
            on_revoke=current(rebalance.on_revoke),
            on_lost=current(rebalance.on_lost),
        )

    def replace_consumer(self, reason: BaseException) -> None:
        """Retire a consumer that gets no answer from its group and join with a new one: what
        the member held is given up (tables, positions), as if the partitions were lost, and
        comes back through the new consumer's assignment. The old one leaves the group on a
        thread of its own, abandoned if it does not within ``_RETIRE_S``."""
        log.warning(
            "%s/%s replaces its consumer (no answer from its group): %s",
            self.group_id,
            self.instance_id,
            reason,
        )
        self._metrics.consumer_replacements.labels(self.group_id).inc()
        old, rebalance = self._consumer, self._rebalance
        assert rebalance is not None, "joined before"
        rebalance.release_all()
        self.join(rebalance)
        if old is not None and not retire(old, _RETIRE_S):
            log.warning("%s: the retired consumer did not close; abandoned", self.group_id)

    def group_metadata(self) -> Any:
        """What a transaction sends with its offsets (KIP-447), asked once per rebalance."""
        if self._group_metadata is None:
            self._group_metadata = self.consumer.consumer_group_metadata()
        return self._group_metadata

    def regrouped(self) -> None:
        """The assignment changed: the group metadata is asked for again."""
        self._group_metadata = None

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (the producer's metadata; raises if none)."""
        try:
            metadata = self.producer.list_topics(topic, timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise translate(exc, f"metadata of {topic}") from exc
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise BrokerError(f"topic {topic!r} does not exist")
        return len(found.partitions)

    def leave(self) -> None:
        """Leave the group: the consumer revokes (its callbacks still act) and closes."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def drop_producer(self, flush: bool) -> None:
        """Let the producer go, flushed first unless the member is uncertain (``flush``
        false: a resync would have replaced it)."""
        if self._producer is not None:
            if flush:
                self._producer.flush(TIMEOUT_S)
            self._producer = None
