"""Under-replicated partitions a resyncing member waits on: a gauge and one log line.

Owns :class:`ReplicationWatch`: at every resync it looks at the partitions the member reads and
writes, sets ``vigil_runtime_under_replicated_partitions`` and logs once per change, so a wait
for ``min.insync.replicas`` is never a silent resync loop. Leaves out the resync
(``transactions``) and reading a partition's condition (``pipeline.kafka.failover``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from confluent_kafka import KafkaException

from pipeline.kafka.failover import unsettled_partitions
from pipeline.rules.errors import BrokerError
from pipeline.runtime.member import Member
from pipeline.runtime.metrics import RuntimeMetrics

__all__ = ["ReplicationWatch"]

log = logging.getLogger(__name__)

_METADATA_S: Final = 2.0  # a look is best effort: a broker that does not answer is the news


class ReplicationWatch:
    """The member's topics' partitions short of in-sync replicas (or of a leader), as of the
    last :meth:`look`."""

    def __init__(self, member: Member, topics: Iterable[str], metrics: RuntimeMetrics) -> None:
        self._member = member
        self._topics = sorted(set(topics))
        self._metrics = metrics
        self.short: list[str] = []  # partition_condition lines, as last logged

    def look(self) -> list[str]:
        """Read the cluster's metadata and report what changed; the partitions short now
        (unchanged when the metadata cannot be read)."""
        try:
            metadata = self._member.producer.list_topics(timeout=_METADATA_S)
        except (KafkaException, BrokerError) as exc:
            log.debug("replication of %s not read: %s", self._member.group_id, exc)
            return self.short
        short = unsettled_partitions(metadata, self._topics)
        group, instance = self._member.group_id, self._member.instance_id
        self._metrics.under_replicated.labels(group).set(len(short))
        if short and short != self.short:
            log.warning(
                "%s/%s waits on %d partition(s) short of in-sync replicas or of a leader "
                "(writes wait for min.insync.replicas): %s",
                group,
                instance,
                len(short),
                "; ".join(short),
            )
        elif self.short and not short:
            log.warning("%s/%s: every partition it uses is back in sync", group, instance)
        self.short = short
        return short
