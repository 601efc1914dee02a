"""Rebalances of a stream app member: what it restores when partitions arrive and gives up when
they leave (DESIGN §2, §10).

On assignment the committed offsets are read first (the broker answers once an earlier owner's
pending transaction is resolved), then the tables of exactly the assigned partition numbers are
restored, and each input resumes at its committed offset or past what the changelog already
reflects, whichever is later. Revoke commits; lost aborts. A callback never raises: when the
broker cannot answer one (it is restarting or stalled), the partitions are taken as they are and
the member resyncs on its next step (``transactions``), before any of their records is
processed. :class:`Assignment` is one seam of :class:`~pipeline.runtime.app.StreamApp`, which
mixes it in.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipeline.rules.errors import BrokerError
from pipeline.runtime.checkpoint import InputPositions, committed_offsets, start_offsets
from pipeline.runtime.isolation import Isolation
from pipeline.runtime.metrics import RuntimeMetrics
from pipeline.runtime.poison import Quarantine
from pipeline.runtime.state import TaskState
from pipeline.runtime.transactions import TIMEOUT_S

__all__ = ["Assignment"]

log = logging.getLogger(__name__)


class Assignment:
    """The rebalance callbacks of a member and what it holds now."""

    group_id: str
    _state: TaskState
    _positions: InputPositions
    _quarantine: Quarantine
    _isolation: Isolation
    _metrics: RuntimeMetrics
    _group_metadata: Any
    _assigned: list[TopicPartition]

    if TYPE_CHECKING:  # provided by StreamApp

        def commit(self, rewind: bool = True) -> bool: ...

        def _abort(self, restore: bool = True) -> None: ...

        def request_resync(self, reason: BaseException | str) -> None: ...

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalances.labels(self.group_id, "assigned").inc()
        self._group_metadata = None
        self._assigned = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        try:
            # Committed offsets first: the broker answers once an earlier owner's pending
            # transaction is resolved, so the changelogs read next hold all it committed.
            committed = committed_offsets(consumer, partitions, TIMEOUT_S)
            reflected = self._state.restore({tp.partition for tp in partitions})
        except (BrokerError, KafkaException) as exc:
            consumer.assign(partitions)  # from the committed offsets; the resync seeks again
            self.request_resync(f"assignment not restored: {exc}")
            return
        starts = start_offsets(committed, reflected)
        consumer.assign(starts)
        self._positions.resumed(starts)
        log.info("assigned %s", sorted((tp.topic, tp.partition) for tp in starts))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalances.labels(self.group_id, "revoked").inc()
        try:
            self.commit(rewind=False)
        except (BrokerError, KafkaException) as exc:  # the next owner redoes what was open
            self.request_resync(f"commit on revoke failed: {exc}")
        self._state.drop({tp.partition for tp in partitions})
        self._quarantine.forget(partitions)
        self._isolation.forget(partitions)
        self._positions.forget()
        self._assigned = []
        self._group_metadata = None

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalances.labels(self.group_id, "lost").inc()
        try:
            self._abort(restore=False)
        except (BrokerError, KafkaException) as exc:
            self.request_resync(f"abort on loss failed: {exc}")
        self._state.drop({tp.partition for tp in partitions})
        self._quarantine.forget(partitions)
        self._isolation.forget(partitions)
        self._positions.forget()
        self._assigned = []
        self._group_metadata = None

    def assignment(self) -> list[tuple[str, int]]:
        """The input partitions this member holds now."""
        return sorted((tp.topic, tp.partition) for tp in self._assigned)
