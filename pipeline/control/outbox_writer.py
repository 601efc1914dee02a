"""Produce an outbox entry directly, outside the command processor. No longer used by the
daemon: immediate ``send`` and a prompt's answer are ``send`` commands whose entries the command
processor writes in its transaction (DESIGN.md §2). Kept only while ``pipeline.cli.api_cmd``
still builds one; delete it when that wiring goes.

Idempotent producer, ``acks=all``, partition ``murmur2(delivery key)`` as everywhere; the write
is flushed before the caller hears "sent". A retried request carries the same delivery key, so
delivery dedupes it. No network until the first :meth:`KafkaOutbox.write`.

Left out: building the entry (``immediate``) and delivering it (the delivery consumer).
"""

from __future__ import annotations

import threading
from typing import Final, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from consumers.evaluator_records import encode_outbox_entry
from pipeline.errors import BrokerError
from pipeline.kafka.clients import producer_config, translate
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import SchemaRegistry, default_registry
from pipeline.kafka.topics import Topic, Topology
from pipeline.outbox import OutboxEntry

__all__ = ["KafkaOutbox", "OutboxWriter"]

_FLUSH_S: Final = 10.0


class OutboxWriter(Protocol):
    def write(self, entry: OutboxEntry) -> None: ...


class KafkaOutbox:
    """Writes outbox entries; thread-safe."""

    def __init__(
        self, bootstrap: str, topology: Topology, *, schemas: SchemaRegistry | None = None
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topology.name(Topic.OUTBOX)
        self._partitions = topology.partitions_for(Topic.OUTBOX)
        self._schemas = schemas or default_registry()
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    def write(self, entry: OutboxEntry) -> None:
        value = encode_outbox_entry(self._schemas, entry)
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, _msg: Message) -> None:
            if error is not None:
                failures.append(error)

        key = entry.delivery_key
        with self._lock:
            if self._producer is None:
                self._producer = Producer(producer_config(self._bootstrap))
            try:
                self._producer.produce(
                    self._topic,
                    value,
                    key,
                    partition_for(key, self._partitions),
                    on_delivery=delivered,
                )
            except KafkaException as exc:
                raise translate(exc, f"send to {self._topic}") from exc
            if self._producer.flush(_FLUSH_S) > 0:
                raise BrokerError(f"could not write to {self._topic} within {_FLUSH_S:g}s")
        if failures:
            raise BrokerError(f"could not write to {self._topic}: {failures[0].str()}")

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(_FLUSH_S)
                self._producer = None
