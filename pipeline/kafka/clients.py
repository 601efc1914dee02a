"""librdkafka settings, the one producer wrapper and the table-reader factory: the one place vigil
configures Kafka clients (DESIGN §2, §4, §10).

Owns the settings every producer and consumer starts from, :class:`Producer` (every
non-transactional writer: created on first use, a report per record, one flush that raises) and
:func:`table_consumer` (``assign()``, never a group). Error translation is ``failures``'s.
Leaves out the stream runtime (``pipeline.runtime``) and topic specs (``topics``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Final

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, Message

from pipeline.kafka.failures import (
    FATAL_CODES,
    TRANSIENT_CODES,
    BrokerFailure,
    ErrorKind,
    classify,
    is_partition_eof,
    is_transient,
    raise_for_message,
    translate,
)
from pipeline.kafka.properties import LOG, active
from pipeline.rules.errors import BrokerError

__all__ = [
    "FATAL_CODES",
    "TRANSIENT_CODES",
    "BrokerFailure",
    "ErrorKind",
    "Producer",
    "classify",
    "consumer_config",
    "is_partition_eof",
    "is_transient",
    "producer_config",
    "raise_for_message",
    "ready_batch",
    "retire",
    "table_consumer",
    "table_consumer_config",
    "translate",
]

# A crashed transaction pins read_committed readers until the coordinator aborts it, so keep it
# short (DESIGN.md §10); it must exceed message.timeout.ms or librdkafka refuses the config.
TRANSACTION_TIMEOUT_MS = 12_000
MESSAGE_TIMEOUT_MS = 10_000
# The first retry of a transactional request the coordinator refused with CONCURRENT_TRANSACTIONS
# (the previous transaction's markers or a partition registration still being written: a few
# ms). librdkafka's default, 100 ms, made an offsets send right after a commit or a registration
# wait a tenth of a second; the Java producer retries such registrations after 20 ms
# (KAFKA-5477). Later retries still double (``retry.backoff.max.ms``, 1 s).
TRANSACTION_RETRY_BACKOFF_MS = 10
_QUEUE_FULL_WAIT_S: Final = 30.0


def producer_config(
    bootstrap: str, *, transactional_id: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """Settings for every vigil producer: Java-compatible placement, acks=all, idempotence,
    then the configured passthrough properties (``pipeline.kafka.properties``).

    ``overrides`` are librdkafka names, passed as a mapping: ``**{"linger.ms": 20}``.
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "partitioner": "murmur2_random",
        "acks": "all",
        "enable.idempotence": True,
        # Batching: a few ms of linger costs nothing at commit cadence and multiplies throughput.
        "linger.ms": 5,
        "batch.num.messages": 10_000,
        "compression.type": "lz4",
        "message.timeout.ms": MESSAGE_TIMEOUT_MS,
        "logger": LOG,
        **active().for_producer(),  # [kafka.client] and [kafka.producer]
    }
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
        config["transaction.timeout.ms"] = TRANSACTION_TIMEOUT_MS
        config.setdefault("retry.backoff.ms", TRANSACTION_RETRY_BACKOFF_MS)  # unless configured
    config.update(overrides)
    _check_timeouts(config)
    return config


def consumer_config(bootstrap: str, group_id: str, **overrides: Any) -> dict[str, Any]:
    """Settings for a group member whose input partitions line up across topics.

    Classic protocol with the range assignor gives every member the same partition numbers of
    every co-partitioned topic (confluent-kafka offers no custom assignor, DESIGN.md §2).
    Offsets are committed only through transactions, never automatically.
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "group.protocol": "classic",
        "partition.assignment.strategy": "range",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 1_000,
        "logger": LOG,
        **active().for_consumer(),  # [kafka.client] and [kafka.consumer]
    }
    config.update(overrides)
    return config


def table_consumer_config(bootstrap: str, name: str, **overrides: Any) -> dict[str, Any]:
    """Settings for a consumer that reads tables with ``assign()``, never joining a group.

    ``enable.partition.eof`` is how "caught up" is detected: transaction markers take offsets,
    so the last record's offset + 1 is not the end (DESIGN.md §10). librdkafka insists on a
    ``group.id``; it is never joined or committed to.
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"{name}.table-reader",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "logger": LOG,
        **active().for_consumer(),  # [kafka.client] and [kafka.consumer]
    }
    config.update(overrides)
    return config


def _check_timeouts(config: dict[str, Any]) -> None:
    if "transactional.id" not in config:
        return
    if int(config["transaction.timeout.ms"]) <= int(config["message.timeout.ms"]):
        raise BrokerError("transaction.timeout.ms must exceed message.timeout.ms")


def table_consumer(bootstrap: str, name: str, **overrides: Any) -> confluent_kafka.Consumer:
    """A consumer of :func:`table_consumer_config`: read with ``assign()``, never a group."""
    return confluent_kafka.Consumer(table_consumer_config(bootstrap, name, **overrides))


class Producer:
    """An idempotent, non-transactional producer, created on first use (no network before).

    :meth:`produce` queues one record on an explicit partition (waiting for room when the local
    queue is full); a failed delivery is remembered and raised by the next call or by
    :meth:`flush`, which waits for every queued record. A fatal failure (an idempotent producer
    whose sequence the broker lost, e.g. after a stall) is raised once and the client dropped:
    it would refuse every later record, so the next call starts a new one (the caller re-sends
    what failed; a record re-sent is at-least-once, as any retry). Not for the stream runtime,
    whose one transactional producer per process is its own.
    """

    def __init__(self, bootstrap: str, overrides: Mapping[str, Any] | None = None) -> None:
        self._config = producer_config(bootstrap, **dict(overrides or {}))
        self._client: confluent_kafka.Producer | None = None
        self._failure: BrokerFailure | None = None
        self.delivered = 0

    @property
    def client(self) -> confluent_kafka.Producer:
        if self._client is None:
            self._client = confluent_kafka.Producer(self._config)
        return self._client

    def metadata(self, timeout_s: float) -> Any:
        """Every topic's metadata (asking for one topic may auto-create it on the broker)."""
        try:
            return self.client.list_topics(timeout=timeout_s)
        except KafkaException as exc:
            raise translate(exc, "reading topic metadata") from exc

    def produce(self, topic: str, key: bytes | str, value: bytes | None, partition: int) -> None:
        client = self.client
        self._raise_failure()
        deadline = time.monotonic() + _QUEUE_FULL_WAIT_S
        while True:
            try:
                client.produce(topic, value, key, partition, on_delivery=self._on_delivery)
                break
            except BufferError:
                # The local queue is full: serve delivery reports until there is room.
                if time.monotonic() > deadline:
                    raise BrokerError(
                        "producer queue stayed full: is the broker reachable?"
                    ) from None
                client.poll(0.1)
            except KafkaException as exc:
                failure = translate(exc, f"producing to {topic}")
                if failure.kind is ErrorKind.FATAL:
                    self._drop()
                raise failure from exc
        client.poll(0)

    def flush(self, timeout_s: float, what: str = "records") -> None:
        """Wait until every queued record is acknowledged, or raise :class:`BrokerError`."""
        if self._client is None:
            return
        remaining = self._client.flush(timeout_s)
        self._raise_failure()
        if remaining:
            raise BrokerError(f"{remaining} {what} not acknowledged within {timeout_s:g}s")

    def close(self, timeout_s: float = 5.0) -> None:
        """Flush what can be flushed (best effort) and forget the client."""
        if self._client is not None:
            self._client.flush(timeout_s)
            self._client = None

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.delivered += 1
        elif self._failure is None:
            self._failure = BrokerFailure(
                f"not delivered to {message.topic()}[{message.partition()}]: {error.str()}",
                code=error.name(),
                kind=classify(error),
            )

    def _raise_failure(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            if failure.kind is ErrorKind.FATAL:
                self._drop()
            raise failure

    def _drop(self) -> None:
        """Forget a client that failed fatally (its queue is lost with it: those records were
        reported failed); the next call creates a new one."""
        LOG.warning("producer failed fatally: a new one takes over")
        self._client = None


def retire(consumer: confluent_kafka.Consumer, wait_s: float = 0.0) -> bool:
    """Close a consumer being replaced on a thread of its own: one stuck on a broker that a
    restart took away (librdkafka #5511) may never finish closing, and must not hold up its
    successor. Waits up to ``wait_s``; whether it closed in that time."""
    closing = threading.Thread(target=consumer.close, name="retire-consumer", daemon=True)
    closing.start()
    closing.join(wait_s)
    return not closing.is_alive()


def ready_batch(
    consumer: confluent_kafka.Consumer, limit: int, timeout_s: float, linger_s: float = 0.0
) -> list[Message]:
    """Up to ``limit`` records (or events): waits at most ``timeout_s`` for the first, then at
    most ``linger_s`` for more; what is already fetched comes without waiting.

    ``consume(limit, timeout)`` alone waits out its whole timeout unless ``limit`` records
    arrive, which puts a fixed wait on every record of a quiet stream. Raises
    ``KafkaException`` as ``poll`` and ``consume`` do.
    """
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    if limit <= 1:
        return [first]
    return [first, *consumer.consume(limit - 1, linger_s)]
