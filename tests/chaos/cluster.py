"""What the cluster scenarios ask of a cluster: which node leads most of vigil's partitions, and
when every one of them is back in sync.

Left out: the nodes themselves (``tests.chaos.servers.OwnKafkaCluster``).
"""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

__all__ = ["busiest_node", "in_sync", "leaders", "wait_in_sync"]


def _metadata(bootstrap: str) -> object:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    return admin.list_topics(timeout=10)


def leaders(bootstrap: str, prefix: str) -> Counter[int]:
    """How many partitions of the topics named ``prefix…`` each node leads."""
    metadata = _metadata(bootstrap)
    counts: Counter[int] = Counter()
    for name, topic in metadata.topics.items():  # type: ignore[attr-defined]
        if name.startswith(prefix):
            counts.update(p.leader for p in topic.partitions.values() if p.leader >= 0)
    return counts


def busiest_node(bootstrap: str, prefix: str, *, besides: int | None = None) -> int:
    """The node leading most of vigil's partitions (other than ``besides``)."""
    counts = leaders(bootstrap, prefix)
    counts.pop(besides or -1, None)
    return counts.most_common(1)[0][0]


def in_sync(bootstrap: str, prefix: str) -> bool:
    """Whether every partition of vigil's topics has a leader and all its replicas in sync."""
    try:
        metadata = _metadata(bootstrap)
    except KafkaException:
        return False
    for name, topic in metadata.topics.items():  # type: ignore[attr-defined]
        if not name.startswith(prefix):
            continue
        for p in topic.partitions.values():
            if p.leader < 0 or len(p.isrs) < len(p.replicas):
                return False
    return True


def wait_in_sync(bootstrap: str, prefix: str, timeout_s: float = 120.0) -> float:
    """Wait until :func:`in_sync`; the seconds it took."""
    started = time.monotonic()
    while not in_sync(bootstrap, prefix):
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"partitions of {prefix}* not back in sync in {timeout_s:g}s")
        time.sleep(0.2)
    return time.monotonic() - started
