"""FollowedKeys against the real broker: a long-lived reader (the API, a command client) sees a
shredded key shredded, and reads a partition from its start again once it has gone unread for
long enough that a tombstone may have been compacted away."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.keys import subject_key
from pipeline.runtime import keys
from pipeline.runtime.keys import FollowedKeys
from tests.integration.runtime_helpers import create_topics
from tests.names import fresh

pytestmark = pytest.mark.integration

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _ring() -> KeyRing:
    return KeyRing(KeyEncryptionKeys.load(), default_codec())


def test_followed_keys_shred_and_read_a_stale_partition_from_its_start(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topology = Topology(fresh("t-fk") + ".", 2, replication_factor=1)
    topic = topology.name(Topic.KEYS)
    count = topology.partitions_for(Topic.KEYS)
    create_topics(kafka_bootstrap, count, topic, compact=True)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    def write(key: str, value: bytes | None, subject: tuple[str, str]) -> None:
        partition = partition_for(subject_key(*subject), count)
        producer.produce(topic, key=key, value=value, partition=partition)
        producer.flush(30)

    kept, shredded = ("t1", "kept"), ("t1", "shredded")
    writer = _ring()
    for subject in (kept, shredded):
        write(*writer.create(subject_owner(*subject), NOW), subject)

    followed = FollowedKeys(kafka_bootstrap, topology, _ring())
    ring = followed.ring_for(*shredded)
    followed.ring_for(*kept)
    assert ring.record(subject_owner(*shredded)) is not None
    assert ring.record(subject_owner(*kept)) is not None

    write(subject_owner(*shredded).topic_key, None, shredded)  # the erasure's tombstone
    assert followed.ring_for(*shredded).record(subject_owner(*shredded)) is None
    assert ring.record(subject_owner(*kept)) is not None

    # A key the log no longer holds (its record and tombstone compacted away while the reader
    # was idle): a partition unread for too long is forgotten and read from its start.
    ghost = ("t1", "ghost")
    ring.apply(*_ring().create(subject_owner(*ghost), NOW))
    followed.ring_for(*ghost)
    assert ring.record(subject_owner(*ghost)) is not None  # recently read: followed, not reread
    monkeypatch.setattr(keys, "REREAD_AFTER_S", -1.0)
    followed.ring_for(*ghost)
    followed.ring_for(*kept)
    assert ring.record(subject_owner(*ghost)) is None
    assert ring.record(subject_owner(*kept)) is not None
