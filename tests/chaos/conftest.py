"""Fixtures of the fault suite: a broker and Redis of the test's own (never the shared ones),
the receiver every destination and governed tool points at, and the deployment under test.

Each test gets fresh servers on its test process's own ports
(``tests.chaos.servers.worker_ports``) with their data in the test's temporary directory, and
stops them afterwards, pass or fail; the deployment's processes are stopped first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.servers import OwnKafka, OwnKafkaCluster, OwnRedis, ServerError, worker_ports
from tests.chaos.stack import BOT_TOKEN, SECRET, Stack
from tests.receiver import Receiver


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[OwnKafka]:
    port, controller, _ = worker_ports()
    server = OwnKafka(port, controller, tmp_path / "kafka")
    try:
        server.start()
        yield server
    finally:
        with contextlib.suppress(ServerError, OSError):
            server.resume()  # a test that failed while the broker was stopped (SIGSTOP)
        with contextlib.suppress(ServerError):
            server.stop()


@pytest.fixture
def kafka_cluster(tmp_path: Path) -> Iterator[OwnKafkaCluster]:
    """Three KRaft nodes of ``kafka.sh cluster-start`` on the lane's second set of ports."""
    port, _, _ = worker_ports(1)
    cluster = OwnKafkaCluster(port, tmp_path / "kafka-cluster")
    try:
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(ServerError):
            cluster.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[OwnRedis]:
    _, _, port = worker_ports()
    server = OwnRedis(port, tmp_path / "redis")
    try:
        server.start()
        yield server
    finally:
        with contextlib.suppress(ServerError):
            server.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(secret=SECRET, bot_token=BOT_TOKEN) as running:
        running.serve_json("/status", {"status": "down"})
        yield running


@pytest.fixture
def deploy(
    tmp_path: Path, kafka: OwnKafka, redis_server: OwnRedis, receiver: Receiver
) -> Iterator[Callable[..., Stack]]:
    """``deploy(**Stack options)``: the topics created, no process started yet; every process
    is stopped at the end (before the servers are)."""
    yield from _deployments(tmp_path, kafka.bootstrap, redis_server, receiver)


@pytest.fixture
def deploy_on_cluster(
    tmp_path: Path, kafka_cluster: OwnKafkaCluster, redis_server: OwnRedis, receiver: Receiver
) -> Iterator[Callable[..., Stack]]:
    """``deploy`` on :func:`kafka_cluster`, its topics replicated 3 (min ISR 2)."""
    yield from _deployments(
        tmp_path, kafka_cluster.bootstrap, redis_server, receiver, replication=3
    )


def _deployments(
    tmp_path: Path, bootstrap: str, redis_server: OwnRedis, receiver: Receiver, **defaults: Any
) -> Iterator[Callable[..., Stack]]:
    made: list[Stack] = []

    def make(**options: Any) -> Stack:
        stack = Stack(
            tmp_path / f"stack{len(made)}",
            bootstrap=bootstrap,
            redis_url=redis_server.url,
            receiver_url=receiver.url,
            **{**defaults, **options},
        )
        made.append(stack)
        stack.create_topics()
        return stack

    try:
        yield make
    finally:
        for stack in made:
            stack.stop_all(timeout_s=30)
