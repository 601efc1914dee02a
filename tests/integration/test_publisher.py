"""The event publisher SDK and ``vigil publish`` against the real broker."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from pipeline.cli.group import vigil
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.rules.errors import TopologyError
from producers.publish.publisher import EventPublisher
from tests.names import fresh

pytestmark = pytest.mark.integration

PARTITIONS = 3
AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def topology(kafka_bootstrap: str) -> Topology:
    topology = Topology(fresh("t-pub") + ".", PARTITIONS)
    ensure_topics(connect_admin(kafka_bootstrap), topology)
    return topology


@pytest.fixture(scope="module")
def config_file(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, topology: Topology
) -> Path:
    path = tmp_path_factory.mktemp("config") / "vigil.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\n'
        f'topic_prefix = "{topology.prefix}"\npartitions = {PARTITIONS}\n',
        encoding="utf-8",
    )
    return path


def read_events(
    bootstrap: str, topology: Topology, source_prefix: str, count: int
) -> list[Message]:
    """Records on ``events`` whose key starts with ``source_prefix``, until ``count`` are seen."""
    topic = topology.name(Topic.EVENTS)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
         "enable.auto.commit": False}
    )  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    found: list[Message] = []
    deadline = time.monotonic() + 30
    try:
        while len(found) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            if (msg.key() or b"").decode().startswith(source_prefix):
                found.append(msg)
    finally:
        consumer.close()
    return found


def test_publisher_places_each_event_on_its_key_partition_and_value_decodes(
    kafka_bootstrap: str, topology: Topology, unique_name: Callable[[str], str]
) -> None:
    run = unique_name("src")
    sources = [f"{run}.{i}" for i in range(12)]
    with EventPublisher(kafka_bootstrap, topology) as publisher:
        for i, source in enumerate(sources):
            publisher.publish(
                source, "build.finished", f"b-{i}", {"n": i, "ok": i % 2 == 0},
                AT + timedelta(seconds=i), cursor=str(i),
            )  # fmt: skip
    assert publisher.delivered == len(sources)

    messages = read_events(kafka_bootstrap, topology, run, len(sources))
    assert len(messages) == len(sources)
    assert len({m.partition() for m in messages}) > 1  # the keys really spread
    for msg in messages:
        key = msg.key() or b""
        assert msg.partition() == partition_for(key, PARTITIONS)
        record_type, value = default_codec().decode(msg.value() or b"")
        i = int(value["event_id"].removeprefix("b-"))
        assert record_type == "event"
        assert value["source_id"] == key.decode() == sources[i]
        assert value["observed_at"] == AT + timedelta(seconds=i)
        assert json.loads(value["payload"]) == {"n": i, "ok": i % 2 == 0}
        assert value["cursor"] == str(i)


def test_publisher_refuses_missing_topic_without_creating_it(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topology = Topology(unique_name("t-absent") + ".", PARTITIONS)
    publisher = EventPublisher(kafka_bootstrap, topology)
    with pytest.raises(TopologyError, match="missing; create it with: vigil topics create"):
        publisher.publish("s", "t", "e", {}, AT)
    topics = connect_admin(kafka_bootstrap).list_topics(timeout=10).topics
    assert topology.name(Topic.EVENTS) not in topics


def test_publisher_refuses_topic_with_drifted_partition_count(
    kafka_bootstrap: str, topology: Topology
) -> None:
    wrong = Topology(topology.prefix, PARTITIONS + 1)
    with pytest.raises(TopologyError, match="has 3 partitions, expected 4"):
        EventPublisher(kafka_bootstrap, wrong).publish("s", "t", "e", {}, AT)


def _lines(source: str, count: int, bad_at: int) -> str:
    lines = []
    for n in range(1, count + 1):
        if n == bad_at:
            lines.append('{"source_id": "x", "event_type": "t", "payload": {}}')  # no ids
            continue
        lines.append(json.dumps({
            "source_id": source, "event_type": "t", "event_id": f"e{n}",
            "observed_at": "2026-11-29T12:00:00Z", "payload": {"n": n},
        }))  # fmt: skip
    return "\n".join(lines) + "\n"


def test_vigil_publish_stops_at_bad_line_and_names_its_number(
    kafka_bootstrap: str, topology: Topology, config_file: Path, tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:  # fmt: skip
    source = unique_name("cli")
    events = tmp_path / "events.jsonl"
    events.write_text(_lines(source, 5, bad_at=3), encoding="utf-8")
    result = CliRunner().invoke(vigil, ["--config", str(config_file), "publish", str(events)])
    assert result.exit_code == 1
    assert f"{events}:3:1: event_id: Field required" in result.stderr
    assert "published 2, rejected 1" in result.stderr
    published = read_events(kafka_bootstrap, topology, source, 2)
    ids = sorted(default_codec().decode(m.value() or b"")[1]["event_id"] for m in published)
    assert ids == ["e1", "e2"]


def test_vigil_publish_skip_invalid_goes_on_from_stdin_and_exits_one(
    kafka_bootstrap: str, topology: Topology, config_file: Path,
    unique_name: Callable[[str], str],
) -> None:  # fmt: skip
    source = unique_name("stdin")
    result = CliRunner().invoke(
        vigil,
        ["--config", str(config_file), "publish", "--skip-invalid", "--progress-every", "2", "-"],
        input=_lines(source, 5, bad_at=2),
    )
    assert result.exit_code == 1
    assert "<stdin>:2:" in result.stderr
    assert "published 4, rejected 1" in result.stderr
    assert "read 2 lines, rejected 1" in result.stderr  # a progress line every 2 lines
    assert "read 4 lines, rejected 1" in result.stderr
    published = read_events(kafka_bootstrap, topology, source, 4)
    ids = sorted(default_codec().decode(m.value() or b"")[1]["event_id"] for m in published)
    assert ids == ["e1", "e3", "e4", "e5"]
