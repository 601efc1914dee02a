"""Error classification: a broker that restarts, stalls or moves leaders is waited out, never
taken for a bug."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipeline.kafka.clients import (
    TRANSIENT_CODES,
    BrokerFailure,
    ErrorKind,
    classify,
    is_transient,
    translate,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._UNKNOWN_PARTITION,  # a position asked before fresh metadata (the issue's)
        KafkaError._NOENT,  # "no leaders found" while listing offsets (the issue's)
        KafkaError.FENCED_LEADER_EPOCH,  # a restarted broker answering a stale client
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    ],
)
def test_broker_away_errors_are_retriable_whatever_librdkafkas_flags(code: int) -> None:
    error = KafkaError(code, "broker away")  # no retriable flag, as librdkafka reports them
    assert classify(error) is ErrorKind.RETRIABLE
    assert is_transient(translate(KafkaException(error), "list offsets"))


def test_flags_decide_before_the_code_list() -> None:
    fatal = KafkaError(KafkaError._TIMED_OUT, "fenced", fatal=True)
    abortable = KafkaError(KafkaError._TIMED_OUT, "timed out", txn_requires_abort=True)
    assert classify(fatal) is ErrorKind.FATAL
    assert classify(abortable) is ErrorKind.ABORTABLE
    assert is_transient(translate(KafkaException(abortable)))
    assert not is_transient(translate(KafkaException(fatal)))


def test_a_produce_on_a_fenced_producer_is_fatal_without_the_flag() -> None:
    """What a produce answers after the coordinator aborted an overrun transaction: rebuild
    the producer (never surfaced as permanent, which stopped the command processor)."""
    error = KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error")
    assert not error.fatal()
    assert classify(error) is ErrorKind.FATAL


def test_a_misconfiguration_stays_permanent() -> None:
    denied = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied")
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED not in TRANSIENT_CODES
    failure = translate(KafkaException(denied), "produce")
    assert failure.kind is ErrorKind.PERMANENT and not is_transient(failure)
    assert str(failure) == "produce: denied [TOPIC_AUTHORIZATION_FAILED, permanent]"


def test_a_caller_may_name_the_kind_and_other_errors_are_not_transient() -> None:
    error = KafkaError(KafkaError._STATE, "erroneous state")
    assert translate(KafkaException(error), "abort", ErrorKind.RETRIABLE).kind is (
        ErrorKind.RETRIABLE
    )
    assert not is_transient(ValueError("a bug"))
    assert is_transient(BrokerFailure("x", code="_TIMED_OUT", kind=ErrorKind.RETRIABLE))
