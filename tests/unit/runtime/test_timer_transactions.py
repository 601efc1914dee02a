"""Timer-driven transactions: which offsets they commit, and that they need an open one."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry

from pipeline.rules.errors import BrokerError
from pipeline.runtime.app import InputRecord, ProcessContext, StreamApp
from pipeline.runtime.checkpoint import OFFSET_INVALID, resume_positions

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
        "127.0.0.1:1", "g", "i", ["in"], ignore, registry=CollectorRegistry()
    )  # no network until start()
    with pytest.raises(BrokerError, match="no transaction is open"):
        app.context(0)
    assert app.aborts == 0
