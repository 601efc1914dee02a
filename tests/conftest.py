"""Shared fixtures. Servers are found in this order (DESIGN.md §6): KAFKA_BOOTSTRAP_SERVERS /
REDIS_URL when set; else testcontainers when a Docker engine answers; else the project's own
process-based broker and Redis from ``deploy/``, started for the session on KAFKA_PORT /
REDIS_PORT (defaults 9092 / 6379, which must be free) and stopped at its end.

Fixture contract used by every test module (keep these names):
- ``kafka_bootstrap`` (session): ``"host:port"`` of a real broker.
- ``redis_url`` (session): ``"redis://host:port/db"`` of a real Redis.
- ``unique_name`` (function): a factory ``unique_name("prefix") -> str`` unique per call
  (:func:`tests.names.fresh`: topics so named are deleted at the end of the session when the
  broker is a shared one, ``KAFKA_BOOTSTRAP_SERVERS``).

Servers start lazily: a run of unit tests alone starts nothing.

Every vigil process needs a key-encryption key (DESIGN.md §10): unless the environment names one,
``$VIGIL_MASTER_KEYS`` is set here to a fixed test key, which the processes tests start inherit.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.names import RUN, fresh, ours

ROOT = Path(__file__).resolve().parent.parent
TEST_KEK = "test:" + base64.urlsafe_b64encode(hashlib.sha256(b"vigil tests").digest()).decode()
os.environ.setdefault("VIGIL_MASTER_KEYS", TEST_KEK)
KAFKA_SH = ROOT / "deploy" / "kafka" / "kafka.sh"
REDIS_SH = ROOT / "deploy" / "redis" / "redis.sh"


def _docker_answers() -> bool:
    """True when testcontainers is importable and a Docker engine answers ``GET /_ping``.

    Asked over a plain socket: the Docker SDK leaks one when no engine listens."""
    if importlib.util.find_spec("testcontainers") is None:
        return False
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(3)
            with sock:
                sock.connect(host.removeprefix("unix://"))
                return _pong(sock)
        address = host.removeprefix("tcp://").rsplit(":", 1)
        with socket.create_connection((address[0], int(address[1])), timeout=3) as sock:
            return _pong(sock)
    except (OSError, ValueError, IndexError):
        return False


def _pong(sock: socket.socket) -> bool:
    sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
    status_line = sock.recv(64).split(b"\r\n", 1)[0]
    return status_line.startswith(b"HTTP/1.") and b" 200" in status_line


def _script(script: Path, command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), command],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {result.returncode}"


@contextmanager
def _own_server(
    script: Path, port_var: str, default_port: str, env: dict[str, str], what: str
) -> Iterator[str]:
    """Start a server with a deploy script for the session; yield its port; stop it after."""
    port = os.environ.get(port_var, default_port)
    env = {**env, port_var: port}
    if _script(script, "status", env).returncode == 0:
        pytest.fail(
            f"{what} already answers on 127.0.0.1:{port} but its address is not set: export "
            f"{'KAFKA_BOOTSTRAP_SERVERS' if 'kafka' in script.name else 'REDIS_URL'} to use it, "
            f"or set {port_var} to a free port (or run `make test`)"
        )
    started = _script(script, "start", env)
    if started.returncode != 0:
        pytest.fail(f"could not start {what}: {_last_line(started)}")
    try:
        yield port
    finally:
        _script(script, "stop", env)


def _delete_our_topics(bootstrap: str) -> None:
    """Delete the topics this test process named (:mod:`tests.names`) on a shared broker; a
    broker that does not answer is left as it is (the tests already said what they had to)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        topics = sorted(t for t in admin.list_topics(timeout=10).topics if ours(t))
        for first in range(0, len(topics), 200):
            futures = admin.delete_topics(topics[first : first + 200], operation_timeout=30)
            for future in futures.values():
                with contextlib.suppress(Exception):  # already gone, or the broker is
                    future.result(timeout=60)
    except Exception as exc:  # cleanup never fails a finished session
        print(f"\ntest topics of run {RUN} not deleted: {exc}", file=sys.stderr)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    value = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if value:
        yield value
        _delete_our_topics(value)
        return
    if _docker_answers():
        from testcontainers.community.kafka import KafkaContainer

        container: AbstractContextManager[Any] = KafkaContainer().with_kraft()
        with container as kafka:
            yield str(kafka.get_bootstrap_server())
        return
    data = tmp_path_factory.mktemp("kafka")
    env = {"KAFKA_DATA_DIR": str(data)}
    with _own_server(KAFKA_SH, "KAFKA_PORT", "9092", env, "Kafka") as port:
        yield f"127.0.0.1:{port}"


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    value = os.environ.get("REDIS_URL")
    if value:
        yield value
        return
    if _docker_answers():
        from testcontainers.community.redis import RedisContainer

        container: AbstractContextManager[Any] = RedisContainer("redis:7")
        with container as redis:
            host, port = redis.get_container_host_ip(), redis.get_exposed_port(6379)
            yield f"redis://{host}:{port}/0"
        return
    data = tmp_path_factory.mktemp("redis")
    env = {"REDIS_DIR": str(data), "REDIS_APPENDONLY": "no"}
    with _own_server(REDIS_SH, "REDIS_PORT", "6379", env, "Redis") as port:
        yield f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    return fresh


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The inner loop stays fast: a ``-m`` expression that does not name ``slow`` (``-m unit``)
    leaves the long generated-input properties out; a run without ``-m`` (``make test``, CI)
    and ``-m slow`` keep them."""
    expression = config.getoption("markexpr") or ""
    if not expression or "slow" in expression:
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]
