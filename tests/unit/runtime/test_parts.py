"""The pure parts of the stream runtime: table undo, offsets header, resume points, settings."""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka import Producer as KafkaProducer

from pipeline.kafka.clients import (
    BrokerFailure,
    ErrorKind,
    Producer,
    classify,
    consumer_config,
    producer_config,
    translate,
)
from pipeline.kafka.partitioner import partition_for
from pipeline.rules.errors import BrokerError
from pipeline.runtime.checkpoint import OFFSET_INVALID, Checkpoint, start_offsets
from pipeline.runtime.processing import Placement
from pipeline.runtime.state import TaskState
from pipeline.runtime.tables import (
    Table,
    TableKind,
    TableReader,
    TableSpec,
    decode_offsets,
    encode_offsets,
)

pytestmark = pytest.mark.unit

OWNED = TableSpec("counts", "counts-changelog", TableKind.OWNED)


def test_rollback_after_writes_restores_exactly_the_committed_values() -> None:
    table = Table(OWNED, 0)
    table.apply("kept", b"1")
    table.apply("changed", b"1")
    table.committed()
    table.set("changed", b"2")
    table.set("changed", b"3")
    table.set("added", b"1")
    table.delete("kept")
    assert dict(table.dirty()) == {"changed": b"3", "added": b"1", "kept": None}
    table.rollback()
    assert dict(table.items()) == {"kept": b"1", "changed": b"1"}
    assert list(table.dirty()) == []


def test_commit_keeps_writes_and_clears_what_is_dirty() -> None:
    table = Table(OWNED, 1)
    table.set("k", b"1")
    table.committed()
    table.rollback()
    assert table.get("k") == b"1" and list(table.dirty()) == []


def test_write_to_read_only_table_is_refused() -> None:
    table = Table(TableSpec("grants", "grants", TableKind.GLOBAL), -1)
    with pytest.raises(BrokerError, match="read-only"):
        table.set("g", b"x")


def test_offsets_header_round_trips() -> None:
    positions = {"events": 120, "ticks": 7}
    assert decode_offsets(encode_offsets(positions)) == positions
    assert decode_offsets(None) == {}


def test_resume_point_is_the_later_of_committed_and_reflected() -> None:
    committed = [
        TopicPartition("events", 0, 100),
        TopicPartition("events", 1, OFFSET_INVALID),
        TopicPartition("ticks", 0, 50),
    ]
    reflected = {0: {"events": 90, "ticks": 60}, 1: {"events": 30}}
    starts = {(tp.topic, tp.partition): tp.offset for tp in start_offsets(committed, reflected)}
    assert starts == {("events", 0): 100, ("events", 1): 30, ("ticks", 0): 60}


def test_resume_point_without_history_lets_auto_offset_reset_decide() -> None:
    (tp,) = start_offsets([TopicPartition("events", 2, OFFSET_INVALID)], {})
    assert tp.offset == OFFSET_INVALID


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Begins:
    """The one producer call :meth:`Checkpoint.begin` makes."""

    def begin_transaction(self) -> None:
        return None


def _checkpoint(clock: _Clock, **kwargs: Any) -> Checkpoint:
    return Checkpoint(**{"commit_every": 10**9, "interval_s": 0.1, **kwargs}, clock=clock)


def test_checkpoint_is_due_after_enough_records_but_not_before() -> None:
    clock = _Clock()
    checkpoint = _checkpoint(clock, commit_every=10, interval_s=3600)
    checkpoint.ended()
    assert not checkpoint.due()  # nothing open
    checkpoint.begin(cast(KafkaProducer, _Begins()))
    checkpoint.records = 9
    assert not checkpoint.due()
    checkpoint.records = 10
    assert checkpoint.due()


def test_steady_input_commits_an_interval_after_the_last_commit() -> None:
    clock = _Clock()
    checkpoint = _checkpoint(clock)
    checkpoint.ended()  # a commit ended at 1000.0
    clock.now += 0.03  # the next record comes in
    checkpoint.begin(cast(KafkaProducer, _Begins()))
    assert checkpoint.due_at() == pytest.approx(1000.1)  # not 1000.13: begun does not count
    clock.now = 1000.099
    assert not checkpoint.due()
    clock.now = 1000.1
    assert checkpoint.due()


def test_a_record_after_a_quiet_spell_commits_as_soon_as_it_is_processed() -> None:
    clock = _Clock()
    checkpoint = _checkpoint(clock)
    assert checkpoint.due_at() < clock.now  # nothing committed yet: no reason to wait
    checkpoint.ended()
    clock.now += 5.0
    checkpoint.begin(cast(KafkaProducer, _Begins()))
    checkpoint.records = 1
    assert checkpoint.due()


def test_an_open_transaction_is_due_within_its_budget() -> None:
    clock = _Clock()
    checkpoint = _checkpoint(clock, interval_s=60.0, budget_s=4.0)
    checkpoint.ended()
    checkpoint.begin(cast(KafkaProducer, _Begins()))
    assert checkpoint.due_at() == pytest.approx(1004.0)
    clock.now += 4.0
    assert checkpoint.due() and checkpoint.overdue()


def test_transactional_producer_settings_follow_the_design() -> None:
    config = producer_config("b:9092", transactional_id="evaluator-host1")
    assert config["partitioner"] == "murmur2_random"
    assert config["acks"] == "all" and config["enable.idempotence"] is True
    assert 10_000 <= config["transaction.timeout.ms"] <= 15_000
    assert config["transaction.timeout.ms"] > config["message.timeout.ms"]
    # CONCURRENT_TRANSACTIONS right after a commit is retried in ms, not librdkafka's 100 ms
    assert config["retry.backoff.ms"] <= 20
    assert "retry.backoff.ms" not in producer_config("b:9092")  # others keep the default


def test_transaction_timeout_not_above_message_timeout_is_refused() -> None:
    with pytest.raises(BrokerError, match=r"transaction\.timeout\.ms"):
        producer_config("b:9092", transactional_id="x", **{"message.timeout.ms": 20_000})


def test_group_consumer_settings_line_partitions_up_and_never_autocommit() -> None:
    config = consumer_config("b:9092", "evaluator")
    assert config["group.protocol"] == "classic"
    assert config["partition.assignment.strategy"] == "range"
    assert config["isolation.level"] == "read_committed"
    assert config["enable.auto.commit"] is False
    assert config["auto.offset.reset"] == "earliest"


@pytest.mark.parametrize(
    ("flags", "kind"),
    [
        ({"fatal": True}, ErrorKind.FATAL),
        ({"txn_requires_abort": True}, ErrorKind.ABORTABLE),
        ({"retriable": True}, ErrorKind.RETRIABLE),
        ({}, ErrorKind.PERMANENT),
    ],
)
def test_errors_are_classified_by_their_librdkafka_flags(
    flags: dict[str, bool], kind: ErrorKind
) -> None:
    error = KafkaError(KafkaError._FENCED, "x", **flags)
    assert classify(error) is kind
    translated = translate(KafkaException(error), "commit")
    assert isinstance(translated, BrokerFailure) and translated.kind is kind
    assert translated.code == "_FENCED"


def test_placement_uses_java_partition_and_looks_counts_up_once() -> None:
    asked: list[str] = []

    def lookup(topic: str) -> int:
        asked.append(topic)
        return 12

    placement = Placement(lookup)
    assert placement.partition_of("outbox", "abc") == partition_for("abc", 12)
    assert placement.partition_of("outbox", b"abd") == partition_for(b"abd", 12)
    assert placement.partition_of("outbox", None) == -1
    assert asked == ["outbox"]


def test_empty_global_table_is_there_before_loading_and_for_every_partition() -> None:
    spec = TableSpec("grants", "grants", TableKind.GLOBAL)
    state = TaskState([spec], TableReader({"bootstrap.servers": "unused:1"}), lambda _: 1)
    whole = state.whole("grants")  # no network: views can be built on it before start
    assert state.table("grants", 3) is whole and len(whole) == 0


@pytest.mark.parametrize(
    "code", [KafkaError._STATE, KafkaError._UNKNOWN_PARTITION, KafkaError.NOT_COORDINATOR]
)
def test_what_a_stalled_or_restarting_broker_leaves_behind_is_retriable(code: int) -> None:
    # _STATE came from produce after a 30 s broker stall (the coordinator had aborted the
    # transaction); it must resync the member, not end the process.
    assert classify(KafkaError(code, "x")) is ErrorKind.RETRIABLE
    assert translate(KafkaException(KafkaError(code)), "produce").kind is ErrorKind.RETRIABLE


def test_a_producer_that_failed_fatally_is_replaced_after_reporting_it_once() -> None:
    # An idempotent producer whose sequence the broker lost goes fatal and refuses every later
    # record: a publisher retrying on it would stall silently (seen after a 30 s broker stall).
    producer = Producer("127.0.0.1:1")  # nothing answers: records only queue
    producer.produce("t", b"k", b"v", 0)
    first = producer.client
    fatal = KafkaError(KafkaError._FATAL, "sequence lost", fatal=True)
    producer._on_delivery(fatal, Message(topic="t", partition=0, value=b"v"))
    with pytest.raises(BrokerFailure) as raised:
        producer.produce("t", b"k", b"v", 0)
    assert raised.value.kind is ErrorKind.FATAL
    producer.produce("t", b"k", b"v", 0)  # a new client takes the record
    assert producer.client is not first
    producer.close(0)
