"""deploy/kafka/kafka.sh, on its own broker: a stop then start keeps topics, records and
committed offsets; bad input ends with one clear line and a non-zero exit. Leaves the shared
broker alone: every broker here runs on free ports with a temporary data dir."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

pytestmark = pytest.mark.integration

KAFKA_SH = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "kafka.sh"
T = TypeVar("T")
# A fresh broker answers metadata before its group coordinator has loaded its offsets.
_COORDINATOR_BUSY = {
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
}


def _until_coordinator_ready(call: Callable[[], T], deadline_s: float = 60.0) -> T:
    """Run ``call``, again while the group coordinator is still loading (bounded)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() not in _COORDINATOR_BUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _kafka_sh(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(KAFKA_SH), command],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Settings for a broker of this test's own; stopped at the end, also on failure."""
    env = {
        "VIGIL_BROKER": "kafka",
        "KAFKA_PORT": str(_free_port()),
        "KAFKA_CONTROLLER_PORT": str(_free_port()),
        "KAFKA_DATA_DIR": str(tmp_path / "kafka"),
    }
    try:
        yield env
    finally:
        _kafka_sh("stop", env)


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        committed = _until_coordinator_ready(lambda: consumer.committed(wanted, timeout=30))
        return {tp.partition: tp.offset for tp in committed}
    finally:
        consumer.close()


def _read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        values: list[bytes] = []
        for _ in range(120):
            if len(values) >= expected:
                break
            for message in consumer.consume(num_messages=100, timeout=0.5):
                value = message.value()
                if not message.error() and value is not None:
                    values.append(value)
        return values
    finally:
        consumer.close()


@pytest.mark.chaos
def test_stop_then_start_keeps_topic_records_and_committed_offsets(
    own_broker: dict[str, str], unique_name: Callable[[str], str]
) -> None:
    started = _kafka_sh("start", own_broker)
    assert started.returncode == 0, started.stderr
    assert "Apache Kafka" in started.stdout
    bootstrap = f"127.0.0.1:{own_broker['KAFKA_PORT']}"
    topic, group = unique_name("kept"), unique_name("kept-group")

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, value=str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    offsets = [TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    _until_coordinator_ready(lambda: consumer.commit(offsets=offsets, asynchronous=False))
    consumer.close()

    stopped = _kafka_sh("stop", own_broker)
    assert stopped.returncode == 0, stopped.stderr
    assert _kafka_sh("status", own_broker).returncode == 1
    restarted = _kafka_sh("start", own_broker)
    assert restarted.returncode == 0, restarted.stderr

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    assert len(metadata.topics[topic].partitions) == 2
    assert sorted(int(v) for v in _read_all(bootstrap, topic, 10)) == list(range(10))
    assert _committed(bootstrap, group, topic, 2) == {0: 3, 1: 4}


def test_start_on_a_busy_port_exits_nonzero_with_one_line(own_broker: dict[str, str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", int(own_broker["KAFKA_PORT"])))
        busy.listen()
        result = _kafka_sh("start", own_broker)
    assert result.returncode != 0
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"kafka.sh: port {own_broker['KAFKA_PORT']} is in use")
    )


def test_start_without_java_says_what_to_install(own_broker: dict[str, str]) -> None:
    result = _kafka_sh("start", {**own_broker, "JAVA_HOME": "/nonexistent"})
    assert result.returncode != 0
    assert "install a Java 17 runtime" in result.stderr.strip().splitlines()[-1]


def test_fetch_without_maven_and_no_cached_jars_says_what_to_install(
    own_broker: dict[str, str], tmp_path: Path
) -> None:
    env = {**own_broker, "VIGIL_CACHE": str(tmp_path / "cache"), "MVN": "/nonexistent/mvn"}
    result = _kafka_sh("fetch", env)
    assert result.returncode != 0
    assert "Maven (mvn) not found" in result.stderr.strip().splitlines()[-1]
