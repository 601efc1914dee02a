"""The event publisher SDK: how an upstream service puts an event on ``events``.

DESIGN.md §2 and §9. :class:`EventPublisher` checks an event
(:func:`~pipeline.records.event.event_record`) and sends it with an idempotent producer (acks=all),
keyed by source id and placed explicitly on Java's partition of that key, so every evaluator finds
it where the co-partitioned tables are. The producer is created on first use (no network in
``__init__``), and the first use also checks that ``events`` exists with the expected partition
count and registers the event schema in ``schemas`` (DESIGN.md §10 "Schema upgrades"). Each event
carries the publishing tenant its caller names (``tenant_id``: the publisher's own, or per
event), never one read from the payload; an event with none feeds no pinned evaluator
(DESIGN.md §10 "Publishers belong to a tenant").

Left out: transactions (a publisher is not part of vigil's exactly-once loop; duplicates are
harmless because the trigger identity ``(event_type, event_id)`` dedupes) and reading events.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Final

from pipeline.config import KafkaConfig, VigilConfig
from pipeline.kafka.clients import Producer
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.schema_catalog import register_schemas
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.event import EVENT, EventLine, event_record
from pipeline.rules.errors import BrokerError, TopologyError

__all__ = ["EventPublisher"]

_METADATA_TIMEOUT_S: Final = 10.0


class EventPublisher:
    """Publishes events to ``<prefix>events``; use as a context manager (flushes on exit).

    ``target`` is a bootstrap string, or the ``[kafka]`` section (or whole configuration),
    which also supplies the topology unless one is given. ``tenant_id`` is the tenant its
    events carry unless :meth:`publish` names one (a Kafka-credentialed publisher is trusted
    to name its own, as the broker's ACLs decide who writes ``events``).
    """

    def __init__(
        self,
        target: str | KafkaConfig | VigilConfig,
        topology: Topology | None = None,
        *,
        codec: AvroCodec | None = None,
        overrides: Mapping[str, Any] | None = None,
        tenant_id: str | None = None,
    ) -> None:
        self._tenant = tenant_id
        kafka = target.kafka if isinstance(target, VigilConfig) else target
        if isinstance(kafka, KafkaConfig):
            self._bootstrap = kafka.bootstrap_servers
            self._topology = topology or kafka.topology()
        else:
            self._bootstrap = kafka
            self._topology = topology or Topology()
        self._codec = codec or default_codec()
        settings = {"client.id": "vigil-publisher", "allow.auto.create.topics": False}
        self._producer = Producer(self._bootstrap, {**settings, **dict(overrides or {})})
        self._topic = self._topology.name(Topic.EVENTS)
        self._partitions = self._topology.partitions_for(Topic.EVENTS)
        self._checked = False
        self._registered = 0  # schema registrations the producer also delivered

    @property
    def delivered(self) -> int:
        """Events the broker has acknowledged so far."""
        return self._producer.delivered - self._registered

    @property
    def topic(self) -> str:
        return self._topic

    def __enter__(self) -> EventPublisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.flush()
        else:
            self._producer.close()  # best effort; the original error is what matters

    def publish(
        self,
        source_id: str,
        event_type: str,
        event_id: str,
        payload: Any,
        observed_at: datetime,
        cursor: str | None = None,
        envelope_id: str | None = None,
        tenant_id: str | None = None,
    ) -> None:
        """Queue one event (for ``tenant_id``, else the publisher's tenant). Delivery is
        confirmed by :meth:`flush`; failures raise there or on a later call as
        :class:`BrokerError`."""
        tenant = self._tenant if tenant_id is None else tenant_id
        record = event_record(
            source_id, event_type, event_id, payload, observed_at, cursor, envelope_id, tenant
        )
        value = self._codec.encode(EVENT, record)
        key = source_id.encode("utf-8")
        if not self._checked:
            self._check_topic()
            self._register()
            self._checked = True
        self._producer.produce(self._topic, key, value, partition_for(key, self._partitions))

    def publish_line(
        self, line: EventLine, observed_at: datetime, tenant_id: str | None = None
    ) -> None:
        """Queue one event as a publisher wrote it (a ``vigil publish`` line, an item of
        ``POST /v1/events``), its shape checked by :func:`~pipeline.records.event.event_line`."""
        self.publish(
            line.source_id,
            line.event_type,
            line.event_id,
            line.payload,
            observed_at,
            cursor=line.cursor,
            envelope_id=line.envelope_id,
            tenant_id=tenant_id,
        )

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every queued event is acknowledged, or raise :class:`BrokerError`."""
        self._producer.flush(timeout, "events")

    def _register(self) -> None:
        """Register the event schema this build writes before its first event (DESIGN.md §10),
        so readers of an older build pause for it instead of taking it for garbage."""
        topic = self._topology.name(Topic.SCHEMAS)
        try:
            partitions = self._topology.partitions_for(Topic.SCHEMAS)
            self._registered = register_schemas(
                self._producer, topic, partitions, self._codec, [EVENT]
            )
        except BrokerError as exc:
            fix = self._topology.create_command()
            raise TopologyError(f"{topic}: cannot register schemas ({exc}); run: {fix}") from exc

    def _check_topic(self) -> None:
        """Refuse to publish into a missing topic or one whose partition count drifted."""
        metadata = self._producer.metadata(_METADATA_TIMEOUT_S)
        found = metadata.topics.get(self._topic)
        fix = self._topology.create_command()
        if found is None or found.error is not None:
            raise TopologyError(f"{self._topic}: missing; create it with: {fix}")
        if len(found.partitions) != self._partitions:
            raise TopologyError(
                f"{self._topic}: has {len(found.partitions)} partitions, expected "
                f"{self._partitions}; partition counts are fixed at creation (an offline "
                "repartition changes them), so configure the count the topic has"
            )
