"""The ``keys`` topic for readers outside a stream app: the control plane and operators' tools.

Owns :func:`read_keys` (a :class:`~pipeline.crypto.ring.KeyRing` filled from the committed
``keys`` records read to their end now, so a key shredded before the call is shredded in the
ring) and :class:`FollowedKeys` (the same, incrementally, for a long-lived reader). Stream apps
hold ``keys`` as a global table instead. Leaves out the ring (``pipeline.crypto``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from pipeline.crypto.ring import KeyRing
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.scan import Bound, scan
from pipeline.kafka.topics import Topic, Topology
from pipeline.rules.keys import subject_key

__all__ = ["FollowedKeys", "read_keys"]


def read_keys(
    bootstrap: str,
    topology: Topology,
    ring: KeyRing,
    subjects: Iterable[tuple[str, str]] | None = None,
) -> int:
    """Apply the ``keys`` records of ``subjects`` (None: all) to ``ring``, in log order; returns
    how many records were read."""
    topic = topology.name(Topic.KEYS)
    partitions: set[int] | None = None
    prefixes: tuple[str, ...] = ()
    if subjects is not None:
        count = topology.partitions_for(Topic.KEYS)
        keys = [subject_key(tenant, user) for tenant, user in subjects]
        if not keys:
            return 0
        partitions = {partition_for(key, count) for key in keys}
        # A subject's own key, and its watcher versions' keys ["t","u","w","v"].
        prefixes = tuple(p for key in keys for p in (key, key[:-1] + ","))
    read = 0
    for msg in scan(bootstrap, topic, partitions=partitions):
        key = (msg.key() or b"").decode("utf-8", "replace")
        if prefixes and not key.startswith(prefixes):
            continue
        ring.apply(key, msg.value())
        read += 1
    return read


# A partition not read for this long is read again from its start: a tombstone older than the
# topic's delete.retention.ms (7 days) may have been compacted away, and following from an old
# offset would then keep a shredded key.
REREAD_AFTER_S = 24 * 3600.0


class FollowedKeys:
    """One ring over the ``keys`` partitions asked for so far, caught up to each partition's
    end on every :meth:`ring_for` (a key shredded before the call is shredded in the ring); a
    partition left unread for :data:`REREAD_AFTER_S` is forgotten and read from its start."""

    def __init__(self, bootstrap: str, topology: Topology, ring: KeyRing) -> None:
        self._bootstrap = bootstrap
        self._topology = topology
        self._ring = ring
        self._next: dict[int, int] = {}  # partition → the first offset not read yet
        self._read_at: dict[int, float] = {}  # partition → when it was last read (monotonic)
        self._lock = threading.Lock()

    def ring_for(self, tenant_id: str, user_id: str) -> KeyRing:
        """The ring, with the subject's partition read to its end now."""
        topic = self._topology.name(Topic.KEYS)
        count = self._topology.partitions_for(Topic.KEYS)
        partition = partition_for(subject_key(tenant_id, user_id), count)
        with self._lock:
            now = time.monotonic()
            if now - self._read_at.get(partition, now) > REREAD_AFTER_S:
                for tenant, user in {(r.owner.tenant_id, r.owner.user_id) for r in self._ring}:
                    if partition_for(subject_key(tenant, user), count) == partition:
                        self._ring.forget(tenant, user)
                self._next.pop(partition, None)
            self._read_at[partition] = now
            start = self._next.get(partition, 0)
            begin = Bound(offsets={(topic, partition): start})
            for msg in scan(self._bootstrap, topic, start=begin, partitions=(partition,)):
                self._ring.apply((msg.key() or b"").decode("utf-8", "replace"), msg.value())
                start = max(start, (msg.offset() or 0) + 1)
            self._next[partition] = start
        return self._ring
