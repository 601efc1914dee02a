"""Rebalances of a stream app member: what it restores when partitions arrive and gives up when
they leave (DESIGN §2, §10).

Owns :class:`Assignment` (committed offsets first, then the tables of exactly the assigned
partition numbers; revoke commits, lost aborts; a callback never raises: a broker that cannot
answer leaves a resync) and the group protocol (:class:`GroupProtocol`, classic or KIP-848,
:func:`resolve_group_protocol`). Leaves out transactions and the clients.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import Any, Final, Literal

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipeline.kafka.api_versions import ProbeError, offers_consumer_groups
from pipeline.rules.errors import BrokerError
from pipeline.runtime.checkpoint import committed_offsets, start_offsets
from pipeline.runtime.isolation import Isolation
from pipeline.runtime.member import TIMEOUT_S, Member
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.runtime.poison import Quarantine
from pipeline.runtime.state import TaskState
from pipeline.runtime.transactions import TransactionScope

__all__ = [
    "Assignment",
    "GroupProtocol",
    "ProtocolChoice",
    "choose_group_protocol",
    "group_protocol_config",
    "resolve_group_protocol",
]

log = logging.getLogger(__name__)


class GroupProtocol(enum.StrEnum):
    """How a member's group rebalances (``group.protocol``)."""

    CLASSIC = "classic"  # eager: every rebalance revokes everything (client-side range)
    CONSUMER = "consumer"  # KIP-848: incremental, server-side range assignor


ProtocolChoice = Literal["auto", "consumer", "classic"]
"""``[kafka] group_protocol``: a protocol, or ``auto`` (whatever the broker serves)."""


def choose_group_protocol(choice: str, broker_offers: bool | None) -> GroupProtocol:
    """The protocol for ``choice`` given whether the broker serves KIP-848 (``None``: it could
    not be asked). ``auto`` takes ``consumer`` only on a yes: ``classic`` works everywhere."""
    if choice == "auto":
        return GroupProtocol.CONSUMER if broker_offers is True else GroupProtocol.CLASSIC
    return GroupProtocol(choice)  # ValueError for anything but the two names


def resolve_group_protocol(
    choice: str, bootstrap: str, properties: Mapping[str, Any] | None = None
) -> GroupProtocol:
    """:func:`choose_group_protocol`, asking the broker only when ``choice`` is ``auto``."""
    if choice != "auto":
        return choose_group_protocol(choice, None)
    try:
        offers: bool | None = offers_consumer_groups(bootstrap, properties)
    except ProbeError as exc:
        log.warning("cannot ask %s for its group protocols (%s): using classic", bootstrap, exc)
        offers = None
    chosen = choose_group_protocol(choice, offers)
    log.info("group protocol: %s (auto; the broker serves KIP-848: %s)", chosen, offers)
    return chosen


# Settings of the classic protocol that a KIP-848 member must not send (the broker owns them).
_CLASSIC_ONLY: Final = (
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
)


def group_protocol_config(config: dict[str, Any], protocol: GroupProtocol) -> dict[str, Any]:
    """``config`` (a member's consumer settings) for ``protocol``: classic keeps the range
    assignor; consumer asks the broker for its ``range`` assignor and drops what it owns."""
    if protocol is GroupProtocol.CLASSIC:
        return {**config, "group.protocol": "classic"}
    found = {k: v for k, v in config.items() if k not in _CLASSIC_ONLY}
    found.update({"group.protocol": "consumer", "group.remote.assignor": "range"})
    return found


class Assignment:
    """The rebalance callbacks of a member and what it holds now (in the scope's input
    positions)."""

    def __init__(
        self,
        protocol: GroupProtocol,
        state: TaskState,
        scope: TransactionScope,
        member: Member,
        quarantine: Quarantine,
        isolation: Isolation,
        metrics: RuntimeMetrics,
    ) -> None:
        self.protocol = protocol
        self._state = state
        self._scope = scope
        self._positions = scope.positions
        self._member = member
        self._quarantine = quarantine
        self._isolation = isolation
        self._metrics = metrics
        self._group_id = member.group_id

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Restore the tables of ``partitions`` and resume them (classic: the whole new
        assignment; KIP-848: what it adds)."""
        if self.protocol is GroupProtocol.CONSUMER:
            self._on_assign_incremental(consumer, partitions)
            return
        self._metrics.rebalances.labels(self._group_id, "assigned").inc()
        self._member.regrouped()
        self._positions.hold(partitions)
        try:
            # Committed offsets first: the broker answers once an earlier owner's pending
            # transaction is resolved, so the changelogs read next hold all it committed.
            committed = committed_offsets(consumer, partitions, TIMEOUT_S)
            reflected = self._state.restore({tp.partition for tp in partitions})
        except (BrokerError, KafkaException) as exc:
            consumer.assign(partitions)  # from the committed offsets; the resync seeks again
            self._scope.request_resync(f"assignment not restored: {exc}")
            return
        starts = start_offsets(committed, reflected)
        consumer.assign(starts)
        self._positions.resumed(starts)
        self._metrics.restored_partitions.labels(self._group_id).inc(
            len({tp.partition for tp in starts})
        )
        log.info("assigned %s", sorted((tp.topic, tp.partition) for tp in starts))

    def _on_assign_incremental(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """KIP-848: ``partitions`` join what the member holds; only their numbers restore."""
        if not partitions:
            return
        self._metrics.rebalances.labels(self._group_id, "assigned").inc()
        self._member.regrouped()
        added = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        numbers = {tp.partition for tp in added}
        split = numbers & {tp.partition for tp in self._positions.held}
        if split:  # p of another input is held already: serve p from the changelog again
            consumer.incremental_assign(added)
            self._positions.hold(added, more=True)
            self._scope.request_resync(f"partitions {sorted(split)} arrived one input at a time")
            return
        try:
            committed = committed_offsets(consumer, added, TIMEOUT_S)
            reflected = self._state.restore(numbers)
        except (BrokerError, KafkaException) as exc:
            consumer.incremental_assign(added)
            self._positions.hold(added, more=True)
            self._scope.request_resync(f"assignment not restored: {exc}")
            return
        starts = start_offsets(committed, reflected)
        consumer.incremental_assign(starts)
        self._positions.resumed(starts)
        self._metrics.restored_partitions.labels(self._group_id).inc(len(numbers))
        self._positions.hold(added, more=True)
        log.info("assigned %s", sorted((tp.topic, tp.partition) for tp in starts))

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Commit, then give up ``partitions`` (classic: all of them; KIP-848: what moves)."""
        if not partitions and self.protocol is GroupProtocol.CONSUMER:
            return
        self._metrics.rebalances.labels(self._group_id, "revoked").inc()
        try:
            self._scope.commit(rewind=False)
        except (BrokerError, KafkaException) as exc:  # the next owner redoes what was open
            self._scope.request_resync(f"commit on revoke failed: {exc}")
        self._release(partitions)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalances.labels(self._group_id, "lost").inc()
        try:
            self._scope.abort(restore=False)
        except (BrokerError, KafkaException) as exc:
            self._scope.request_resync(f"abort on loss failed: {exc}")
        self._release(partitions)

    def release_all(self) -> None:
        """Give up everything held (a consumer being replaced), as if it were lost."""
        self._release(list(self._positions.held))

    def _release(self, partitions: list[TopicPartition]) -> None:
        """Drop the tables, pauses and positions of ``partitions``; the rest stay. A partition
        number still held through another input makes the member resync (its tables were
        dropped with the number)."""
        gone = {(tp.topic, tp.partition) for tp in partitions}
        numbers = {tp.partition for tp in partitions}
        self._state.drop(numbers)
        self._quarantine.forget(partitions)
        self._isolation.forget(partitions)
        self._positions.release(gone)
        self._member.regrouped()
        if numbers & {tp.partition for tp in self._positions.held}:  # p of another input stays
            self._scope.request_resync(f"partitions {sorted(numbers)} left one input at a time")

    def held(self) -> list[tuple[str, int]]:
        """The input partitions this member holds now."""
        return sorted((tp.topic, tp.partition) for tp in self._positions.held)
