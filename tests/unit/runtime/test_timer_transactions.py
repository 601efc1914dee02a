"""Timer-driven transactions: which offsets they commit, that they need an open one, and how
long a step gathers input before the transaction falls due."""

from __future__ import annotations

from typing import cast

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import CollectorRegistry

from pipeline.rules.errors import BrokerError
from pipeline.runtime.app import InputRecord, ProcessContext, StreamApp
from pipeline.runtime.batch import first_arrivals, gather
from pipeline.runtime.checkpoint import (
    OFFSET_INVALID,
    Checkpoint,
    InputPositions,
    resume_positions,
)

pytestmark = pytest.mark.unit


def _offsets(positions: list[TopicPartition]) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): tp.offset for tp in positions}


def test_input_without_position_commits_where_it_resumed() -> None:
    positions = [TopicPartition("outbox", 0, OFFSET_INVALID), TopicPartition("outbox", 1, 57)]
    starts = {("outbox", 0): 40, ("outbox", 1): 10}
    assert _offsets(resume_positions(positions, starts)) == {("outbox", 0): 40, ("outbox", 1): 57}


def test_input_without_position_or_resume_point_is_left_for_the_watermark() -> None:
    positions = [TopicPartition("outbox", 2, OFFSET_INVALID)]
    assert _offsets(resume_positions(positions, {})) == {("outbox", 2): OFFSET_INVALID}


def test_context_outside_a_transaction_is_refused() -> None:
    def ignore(batch: list[InputRecord], ctx: ProcessContext) -> None:
        return None

    app = StreamApp(
        "127.0.0.1:1", "g", "i", ["in"], ignore, metrics_registry=CollectorRegistry()
    )  # no network until start()
    with pytest.raises(BrokerError, match="no transaction is open"):
        app.transaction().context(0)
    assert app.transaction().aborts == 0


class _Consumer:
    """The two calls :class:`InputPositions` makes, with the watermark lookups recorded."""

    def __init__(self, positions: list[TopicPartition], cached_low: int) -> None:
        self.positions = positions
        self.cached_low = cached_low
        self.lookups: list[bool] = []  # cached?

    def position(self, assigned: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in self.positions]

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float = 0, cached: bool = False
    ) -> tuple[int, int]:
        self.lookups.append(cached)
        return (self.cached_low, 9) if cached else (3, 9)


def test_input_with_nothing_committed_or_delivered_is_left_out_while_another_fences() -> None:
    consumer = _Consumer([TopicPartition("ticks", 0), TopicPartition("events", 0, 12)], -1)
    positions = InputPositions().current(consumer, consumer.positions)  # type: ignore[arg-type]
    assert _offsets(positions) == {("events", 0): 12}
    assert consumer.lookups == []


def test_no_input_with_an_offset_commits_one_low_watermark_looked_up_once() -> None:
    consumer = _Consumer([TopicPartition("ticks", 0), TopicPartition("ticks", 1)], -1)
    tracked = InputPositions()
    first = tracked.current(consumer, consumer.positions)  # type: ignore[arg-type]
    again = tracked.current(consumer, consumer.positions)  # type: ignore[arg-type]
    assert _offsets(first) == _offsets(again) == {("ticks", 0): 3}
    assert consumer.lookups == [True, False]  # the cache first; it knew nothing


def test_low_watermark_comes_from_the_consumers_cache_when_it_has_one() -> None:
    consumer = _Consumer([TopicPartition("ticks", 0)], 5)
    positions = InputPositions().current(consumer, consumer.positions)  # type: ignore[arg-type]
    assert _offsets(positions) == {("ticks", 0): 5}
    assert consumer.lookups == [True]


class _Input:
    """A consumer that records how long each ``consume`` may wait; its batches are scripted."""

    def __init__(self, batches: list[list[object]] | None = None) -> None:
        self.waits: list[float] = []
        self._batches = batches or []

    def consume(self, num_messages: int, timeout: float) -> list[object]:
        self.waits.append(timeout)
        return self._batches.pop(0) if self._batches else [object()]


class _Begins:
    def begin_transaction(self) -> None:
        return None


def _checkpoint(interval_ms: int) -> Checkpoint:
    checkpoint = Checkpoint(1000, interval_ms / 1000)
    checkpoint.ended()  # just committed
    return checkpoint


def test_a_batch_stops_filling_when_the_open_transaction_falls_due() -> None:
    checkpoint = _checkpoint(interval_ms=50)
    checkpoint.begin(cast(Producer, _Begins()))
    consumer = _Input()
    gather(cast(Consumer, consumer), checkpoint, 500, timeout=5.0)
    (wait,) = consumer.waits  # one call: no record is held from one call to the next
    assert wait <= 0.05  # the commit is due within 50 ms, not 5 s


def test_a_steady_stream_fills_the_window_in_one_call() -> None:
    checkpoint = _checkpoint(interval_ms=60_000)  # the next one is due a minute later
    consumer = _Input()
    gather(cast(Consumer, consumer), checkpoint, 500, timeout=0.5)
    assert consumer.waits == [0.5]


def test_after_a_quiet_spell_or_for_a_reader_the_first_records_are_not_held() -> None:
    quiet = Checkpoint(1000, 0.1)  # nothing committed for longer than that: due at once
    consumer = _Input([[], [], [object()]])
    batch = gather(cast(Consumer, consumer), quiet, 500, timeout=5.0)
    assert len(batch) == 1 and len(consumer.waits) == 3
    assert all(wait <= 0.005 for wait in consumer.waits)  # slices, each returned whole
    consumer = _Input()
    first_arrivals(cast(Consumer, consumer), _checkpoint(interval_ms=60_000), 500, timeout=0.5)
    assert consumer.waits == [0.005]
