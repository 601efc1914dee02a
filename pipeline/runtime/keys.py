"""The ``keys`` topic for readers outside a stream app: the control plane and operators' tools.

Owns :func:`read_keys`, which fills a :class:`~pipeline.crypto.ring.KeyRing` from the committed
``keys`` records — of a few subjects (their partitions only, since ``keys`` is partitioned by
subject) or of every subject — read to the end the broker has now, so that a key shredded before
the call is shredded in the ring too. Readers call it per request (the API) or per run
(``vigil explain``, ``vigil replay``): what they show after an erasure is erased, never a cached
key's plaintext. Stream apps hold ``keys`` as a global table instead
(:class:`~pipeline.runtime.views.KeyView`).

Leaves out the ring itself (``pipeline.crypto``) and deciding what to read (callers).
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.crypto.ring import KeyRing
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.scan import scan
from pipeline.kafka.topics import Topic, Topology
from pipeline.rules.keys import subject_key

__all__ = ["read_keys"]


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
