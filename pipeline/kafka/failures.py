"""Kafka errors as vigil sees them: one translation, one kind per error, one wait on a future.

Owns :class:`ErrorKind` (what a caller does about an error: retry, abort, rebuild, surface),
:class:`BrokerFailure` (a :class:`~pipeline.rules.errors.BrokerError` with the librdkafka code
and its kind), :func:`classify`, :func:`translate` (``KafkaException`` → ``BrokerFailure`` at
the boundary) and :func:`answer` (an admin request's future, given up on after its timeout).
Leaves out client settings and clients (``pipeline.kafka.clients``).
"""

from __future__ import annotations

import enum
from concurrent.futures import Future
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException, Message

from pipeline.rules.errors import BrokerError

__all__ = [
    "FATAL_CODES",
    "TRANSIENT_CODES",
    "BrokerFailure",
    "ErrorKind",
    "answer",
    "classify",
    "is_partition_eof",
    "is_transient",
    "raise_for_message",
    "translate",
]


class ErrorKind(enum.Enum):
    """What a caller should do about a Kafka error."""

    RETRIABLE = "retriable"  # the broker is away or moving: back off, then try again
    ABORTABLE = "abortable"  # abort the transaction, rewind, go on
    FATAL = "fatal"  # the client is unusable (fenced): rebuild it
    PERMANENT = "permanent"  # a bug or misconfiguration: surface it


# What a restarting, stalled or re-electing broker answers. librdkafka does not flag all of
# these retriable (a list-offsets request to a restarted broker's stale leader is
# FENCED_LEADER_EPOCH; a position asked while metadata is missing is _UNKNOWN_PARTITION; "no
# leaders found" is _NOENT), yet each passes once the broker is back: a process backs off and
# tries again instead of exiting. _STATE ("erroneous state") is what a client answers while it is
# between states a stall left it in: a seek while a new assignment is still being applied, a
# produce from a producer whose transaction the coordinator aborted under it. Both pass after
# the member's resync (a new producer, inputs rewound), so they are retried, not surfaced.
TRANSIENT_CODES: Final = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._NOENT,
        KafkaError._WAIT_COORD,
        KafkaError._RESOLVE,
        KafkaError._PREV_IN_PROGRESS,
        KafkaError._STATE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.CONCURRENT_TRANSACTIONS,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.REBALANCE_IN_PROGRESS,
        # A killed broker fenced and dropped from the cluster's metadata: librdkafka destroys
        # its handle and fails what was waiting on it; the new leader answers when asked again.
        KafkaError._DESTROY_BROKER,
    }
)


class BrokerFailure(BrokerError):
    """A Kafka error translated at the boundary, with the librdkafka code name and its kind."""

    def __init__(self, message: str, *, code: str, kind: ErrorKind) -> None:
        super().__init__(f"{message} [{code}, {kind.value}]")
        self.code = code
        self.kind = kind


# A producer that already failed fatally (fenced: a transaction that overran its timeout was
# aborted by the coordinator, or a newer instance took its transactional id) refuses every
# later produce with ``_FATAL`` — without setting the fatal flag on that error.
FATAL_CODES: Final = frozenset({KafkaError._FATAL})


def classify(error: KafkaError) -> ErrorKind:
    """The kind of a librdkafka error: from the flags librdkafka sets on it,
    :data:`FATAL_CODES` fatal and :data:`TRANSIENT_CODES` (a broker restarting or stalled)
    retriable whatever the flags."""
    if error.fatal() or error.code() in FATAL_CODES:
        return ErrorKind.FATAL
    if error.txn_requires_abort():
        return ErrorKind.ABORTABLE
    if error.retriable() or error.code() in TRANSIENT_CODES:
        return ErrorKind.RETRIABLE
    return ErrorKind.PERMANENT


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a broker failure a process rides out (back off, resync, go on):
    retriable or abortable. Fatal ones are the runtime's to rebuild; permanent ones surface."""
    return isinstance(exc, BrokerFailure) and exc.kind in (
        ErrorKind.RETRIABLE,
        ErrorKind.ABORTABLE,
    )


def is_partition_eof(msg: Message) -> bool:
    """Whether ``msg`` is the end-of-partition event of ``enable.partition.eof``."""
    error = msg.error()
    return error is not None and error.code() == KafkaError._PARTITION_EOF


def translate(
    exc: KafkaException, context: str = "kafka", kind: ErrorKind | None = None
) -> BrokerFailure:
    """Turn a ``KafkaException`` into a :class:`BrokerFailure` (raise it ``from exc``), of
    ``kind`` when the caller knows better than the error's flags."""
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        found = kind or classify(error)
        return BrokerFailure(f"{context}: {error.str()}", code=error.name(), kind=found)
    return BrokerFailure(f"{context}: {exc}", code="UNKNOWN", kind=kind or ErrorKind.PERMANENT)


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


def answer(future: Future[Any], what: str, timeout_s: float) -> Any:
    """The result of an admin request's ``future``; a Kafka error translated, no answer within
    ``timeout_s`` a :class:`~pipeline.rules.errors.BrokerError` saying so."""
    try:
        return future.result(timeout=timeout_s)
    except KafkaException as exc:
        raise translate(exc, what) from exc
    except TimeoutError as exc:
        raise BrokerError(f"{what}: no answer from the broker in {timeout_s:.0f}s") from exc
