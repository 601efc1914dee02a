"""librdkafka settings and error translation: the one place vigil configures Kafka clients.

Owns the settings every producer and consumer of vigil starts from (DESIGN.md §2, §4, §10 and
notes/kafka-broker.md) and the single helper that turns a ``KafkaError`` or
``KafkaException`` into :class:`pipeline.rules.errors.BrokerError` with a categorical
:class:`ErrorKind`. Leaves out creating clients (callers do, lazily) and topic specs
(``topics.py``).
"""

from __future__ import annotations

import enum
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from pipeline.rules.errors import BrokerError

__all__ = [
    "BrokerFailure",
    "ErrorKind",
    "classify",
    "consumer_config",
    "is_abortable",
    "is_fatal",
    "is_partition_eof",
    "is_retriable",
    "producer_config",
    "raise_for_message",
    "table_consumer_config",
    "translate",
]

# A crashed transaction pins read_committed readers until the coordinator aborts it, so keep it
# short (DESIGN.md §10); it must exceed message.timeout.ms or librdkafka refuses the config.
TRANSACTION_TIMEOUT_MS = 12_000
MESSAGE_TIMEOUT_MS = 10_000


def producer_config(
    bootstrap: str, *, transactional_id: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """Settings for every vigil producer: Java-compatible placement, acks=all, idempotence.

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
    }
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
        config["transaction.timeout.ms"] = TRANSACTION_TIMEOUT_MS
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
    }
    config.update(overrides)
    return config


class ErrorKind(enum.Enum):
    """What a caller should do about a Kafka error."""

    RETRIABLE = "retriable"  # try the same call again
    ABORTABLE = "abortable"  # abort the transaction, rewind, go on
    FATAL = "fatal"  # the client is unusable (fenced): rebuild it
    PERMANENT = "permanent"  # a bug or misconfiguration: surface it


class BrokerFailure(BrokerError):
    """A Kafka error translated at the boundary, with the librdkafka code name and its kind."""

    def __init__(self, message: str, *, code: str, kind: ErrorKind) -> None:
        super().__init__(f"{message} [{code}, {kind.value}]")
        self.code = code
        self.kind = kind


def classify(error: KafkaError) -> ErrorKind:
    """The kind of a librdkafka error, from the flags librdkafka sets on it."""
    if error.fatal():
        return ErrorKind.FATAL
    if error.txn_requires_abort():
        return ErrorKind.ABORTABLE
    if error.retriable():
        return ErrorKind.RETRIABLE
    return ErrorKind.PERMANENT


def is_retriable(error: KafkaError) -> bool:
    return classify(error) is ErrorKind.RETRIABLE


def is_abortable(error: KafkaError) -> bool:
    return classify(error) is ErrorKind.ABORTABLE


def is_fatal(error: KafkaError) -> bool:
    return classify(error) is ErrorKind.FATAL


def is_partition_eof(msg: Message) -> bool:
    """Whether ``msg`` is the end-of-partition event of ``enable.partition.eof``."""
    error = msg.error()
    return error is not None and error.code() == KafkaError._PARTITION_EOF


def translate(exc: KafkaException, context: str = "kafka") -> BrokerFailure:
    """Turn a ``KafkaException`` into a :class:`BrokerFailure` (raise it ``from exc``)."""
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        return BrokerFailure(f"{context}: {error.str()}", code=error.name(), kind=classify(error))
    return BrokerFailure(f"{context}: {exc}", code="UNKNOWN", kind=ErrorKind.PERMANENT)


def raise_for_message(msg: Message) -> Message:
    """Return ``msg`` if it carries a record; raise :class:`BrokerFailure` if it carries an error.

    End-of-partition events are not errors: callers that enable them check
    :func:`is_partition_eof` first.
    """
    error = msg.error()
    if error is None:
        return msg
    raise BrokerFailure(
        f"consume {msg.topic()}[{msg.partition()}]: {error.str()}",
        code=error.name(),
        kind=classify(error),
    )


def _check_timeouts(config: dict[str, Any]) -> None:
    if "transactional.id" not in config:
        return
    if int(config["transaction.timeout.ms"]) <= int(config["message.timeout.ms"]):
        raise BrokerError("transaction.timeout.ms must exceed message.timeout.ms")
