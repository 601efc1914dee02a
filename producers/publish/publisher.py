"""The event publisher SDK: how an upstream service puts an event on ``events`` (DESIGN.md §2, §9).

Owns :class:`EventPublisher`: an event checked, sent with an idempotent producer (acks=all) to
Java's partition of its source id, with the tenant its caller names, retried through leader
moves until ``timeout_s``. Leaves out transactions (duplicates dedupe on the trigger identity
``(event_type, event_id)``) and reading events.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Final

from pipeline.config import KafkaConfig, VigilConfig
from pipeline.kafka.clients import Producer
from pipeline.kafka.failover import (
    FAILOVER_WAIT_S,
    partition_condition,
    topic_metadata,
    unsettled_partitions,
)
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.schema_catalog import register_schemas, registration
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.event import EVENT, EventLine, event_record
from pipeline.rules.errors import BrokerError, TopologyError

__all__ = ["EventPublisher"]

_SHOWN: Final = 4  # unsettled partitions named in an error
_ASK_S: Final = 5.0  # one metadata request; a leader move is waited out by asking again


class EventPublisher:
    """Publishes events to ``<prefix>events``; use as a context manager (flushes on exit).

    ``target`` is a bootstrap string, or the ``[kafka]`` section (or whole configuration),
    which also supplies the topology unless one is given. ``tenant_id`` is the tenant its
    events carry unless :meth:`publish` names one (a Kafka-credentialed publisher is trusted
    to name its own, as the broker's ACLs decide who writes ``events``).

    Placed explicitly on Java's partition of the source id, so every evaluator finds an event where
    the co-partitioned tables are. The producer is created on first use (no network in
    ``__init__``), and the first use also checks that ``events`` exists with the expected partition
    count and registers the event schema in ``schemas`` (DESIGN.md §10 "Schema upgrades"). Leader
    moves are waits (§10 "Replicated safely"): a record is retried until ``timeout_s`` (default
    :data:`~pipeline.kafka.failover.FAILOVER_WAIT_S`) before it fails, and a failure names the
    partitions without a leader or short of in-sync replicas; "create the topics" is said only when
    they are missing. Each event carries the publishing tenant its caller names (the publisher's
    own, or per event), never one read from the payload; an event with none feeds no pinned
    evaluator.
    """

    def __init__(
        self,
        target: str | KafkaConfig | VigilConfig,
        topology: Topology | None = None,
        *,
        codec: AvroCodec | None = None,
        overrides: Mapping[str, Any] | None = None,
        timeout_s: float = FAILOVER_WAIT_S,
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
        self._timeout_s = timeout_s
        settings = {
            "client.id": "vigil-publisher",
            "allow.auto.create.topics": False,
            "message.timeout.ms": int(timeout_s * 1000),
        }
        self._producer = Producer(self._bootstrap, {**settings, **dict(overrides or {})})
        self._topic = self._topology.name(Topic.EVENTS)
        self._partitions = self._topology.partitions_for(Topic.EVENTS)
        self._checked = False
        self._written: set[tuple[str, int]] = set()  # partitions written since the last flush
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
        partition = partition_for(key, self._partitions)
        self._producer.produce(self._topic, key, value, partition)
        self._written.add((self._topic, partition))

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

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued event is acknowledged (up to ``timeout``, default the
        publisher's), or raise :class:`BrokerError` naming the partitions that held it up."""
        try:
            self._producer.flush(self._timeout_s if timeout is None else timeout, "events")
        except BrokerError as exc:
            raise self._explained(exc) from exc
        self._written.clear()

    def _register(self) -> None:
        """Register the event schema this build writes before its first event (DESIGN.md §10),
        so readers of an older build pause for it instead of taking it for garbage."""
        topic = self._topology.name(Topic.SCHEMAS)
        self._topic_of(topic)  # missing: say so, with the command that creates it
        partitions = self._topology.partitions_for(Topic.SCHEMAS)
        try:
            self._registered = register_schemas(
                self._producer, topic, partitions, self._codec, [EVENT], self._timeout_s
            )
        except BrokerError as exc:
            key, _ = registration(self._codec.newest(EVENT))
            self._written.add((topic, partition_for(key, partitions)))
            raise self._explained(exc, "cannot register schemas: ") from exc

    def _topic_of(self, name: str) -> Any:
        """``name``'s metadata, waiting out a leader move up to the publisher's timeout;
        :class:`TopologyError` with the command that creates it when the topic is missing."""
        deadline = time.monotonic() + self._timeout_s
        found = topic_metadata(lambda _: self._producer.metadata(_ASK_S), name, deadline)
        if found is None:
            fix = self._topology.create_command()
            raise TopologyError(f"{name}: missing; create it with: {fix}")
        return found

    def _explained(self, exc: BrokerError, what: str = "") -> BrokerError:
        """``exc`` with the partitions of vigil's topics that have no leader or fewer in-sync
        replicas than replicas, as the cluster says now; when it says none (a dead broker not
        fenced yet), the partitions written since the last flush and their leaders."""
        try:
            metadata = self._producer.metadata(_ASK_S)
        except BrokerError:
            return BrokerError(f"{what}{exc}; the cluster does not answer")
        names = [self._topic, self._topology.name(Topic.SCHEMAS)]
        troubled = unsettled_partitions(metadata, names) or [
            f"written to {partition_condition(metadata, topic, partition)}"
            for topic, partition in sorted(self._written)
        ]
        more = f"; and {len(troubled) - _SHOWN} more" if len(troubled) > _SHOWN else ""
        state = "; ".join(troubled[:_SHOWN]) + more if troubled else "nothing was written"
        return BrokerError(f"{what}{exc} (waited up to {self._timeout_s:g}s); {state}")

    def _check_topic(self) -> None:
        """Refuse to publish into a missing topic or one whose partition count drifted."""
        found = self._topic_of(self._topic)
        if len(found.partitions) != self._partitions:
            raise TopologyError(
                f"{self._topic}: has {len(found.partitions)} partitions, expected "
                f"{self._partitions}; partition counts are fixed at creation (an offline "
                "repartition changes them), so configure the count the topic has"
            )
