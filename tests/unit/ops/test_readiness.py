"""Readiness that means ready: a stream process is not ready before it knows its group, and
``vigil dev`` waits until every process's ``/readyz`` says so, naming what is still starting.
Real HTTP listeners on 127.0.0.1 (port 0); no broker."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from pipeline.cli.process import await_app, watch_app
from pipeline.kafka.topics import Topology
from pipeline.ops.dev_stack import PROCESSES, addresses, not_ready
from pipeline.ops.doctor import process_ready
from pipeline.ops.health import HealthServer
from pipeline.rules.native import path_name


@pytest.fixture
def servers() -> Iterator[list[HealthServer]]:
    made: list[HealthServer] = []
    yield made
    for server in made:
        server.close()


def _answering(problem: str | None) -> Callable[[], str | None]:
    return lambda: problem


def _serve(made: list[HealthServer], **checks: str | None) -> HealthServer:
    server = HealthServer("127.0.0.1", 0, metrics_registry=CollectorRegistry(), ttl_s=0.05)
    for name, problem in checks.items():
        server.add(name, _answering(problem))
    made.append(server.start())
    return server


def _settled(server: HealthServer) -> dict[str, str]:
    """The checks' states once each has run at least once."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = server.readiness()[1]
        if "starting" not in states.values():
            return states
        time.sleep(0.02)
    raise AssertionError(f"checks never ran: {states}")


class _App:
    group_id = "ns.evaluator"
    inputs = ("t.events",)


def test_a_stream_process_is_not_ready_until_it_watches_its_group(
    servers: list[HealthServer],
) -> None:
    health = _serve(servers, broker=None)
    await_app(health)
    states = _settled(health)
    assert states["setup"].startswith("starting"), states
    assert health.readiness()[0] is False  # only the broker answered: not ready

    watch_app(health, _App(), Topology("t.", 2, 1))
    ready, states = health.readiness()
    assert "setup" not in states
    assert set(states) == {"broker", "assigned:ns.evaluator", "caught_up:ns.evaluator"}
    assert ready is False  # it has not joined yet


def test_vigil_dev_waits_for_every_process_and_names_what_is_starting(
    tmp_path: Path, servers: list[HealthServer]
) -> None:
    files = addresses(tmp_path)
    assert set(files) == set(PROCESSES)
    files["api"].parent.mkdir(parents=True)
    for name, where in files.items():
        if name == "daemon":
            continue  # not started yet: no address file
        problem = "starting: not assigned yet" if name == "evaluator" else None
        server = _serve(servers, broker=None, **{"assigned:vigil.evaluator": problem})
        _settled(server)
        where.write_text(server.url + "\n")

    waiting = not_ready(tmp_path)

    assert waiting == [
        f"evaluator: not ready ({servers[1].url}): assigned:vigil.evaluator: "
        "starting: not assigned yet",
        "daemon: starting",
    ]


def test_vigil_dev_is_done_waiting_when_every_process_is_ready(
    tmp_path: Path, servers: list[HealthServer]
) -> None:
    files = addresses(tmp_path)
    files["api"].parent.mkdir(parents=True)
    for where in files.values():
        server = _serve(servers, broker=None)
        _settled(server)
        where.write_text(server.url + "\n")
    assert not_ready(tmp_path) == []
    servers[0].close()  # a process that stops answering is waited for again
    assert not_ready(tmp_path)[0].startswith("command-processor: does not answer")


def test_every_process_names_its_hot_path_on_readyz_metrics_and_in_doctor(
    tmp_path: Path, servers: list[HealthServer]
) -> None:
    server = _serve(servers, broker=None)
    _settled(server)
    with urllib.request.urlopen(f"{server.url}/readyz", timeout=5) as response:
        assert json.loads(response.read())["hot_path"] == path_name()
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as response:
        text = response.read().decode()
    assert f'vigil_hot_path_info{{path="{path_name()}"}} 1.0' in text
    where = tmp_path / "ns.evaluator.a.url"
    where.write_text(server.url + "\n")
    finding = process_ready(where, "ns")
    assert finding.detail == f"ready ({server.url}), {path_name()} hot path"
