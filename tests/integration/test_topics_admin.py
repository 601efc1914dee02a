"""``vigil topics`` and ``pipeline.kafka.admin`` against the real broker.

One topology is created per module (every topic, 2 partitions, a unique prefix) and shared; a
test that drifts it puts it back. Drift of the partition count is simulated by describing the
same topics with a different expected count: the broker's topics are never repartitioned.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType

from pipeline.cli.group import vigil
from pipeline.kafka.admin import (
    TopicState,
    check_topology,
    connect_admin,
    describe,
    ensure_topics,
)
from pipeline.kafka.topics import Topic, Topology
from pipeline.rules.errors import TopologyError
from tests.integration.delivery_harness import poll_until
from tests.names import fresh

pytestmark = pytest.mark.integration

PARTITIONS = 2


@pytest.fixture(scope="module")
def prefix() -> str:
    return fresh("t-topics") + "."


@pytest.fixture(scope="module")
def admin(kafka_bootstrap: str) -> AdminClient:
    return connect_admin(kafka_bootstrap)


@pytest.fixture(scope="module")
def config_file(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, prefix: str
) -> Path:
    path = tmp_path_factory.mktemp("config") / "vigil.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\ntopic_prefix = "{prefix}"\n'
        f"partitions = {PARTITIONS}\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def created(config_file: Path) -> list[str]:
    """Run `vigil topics create` twice; return both outputs."""
    runner = CliRunner()
    outputs = []
    for _ in range(2):
        result = runner.invoke(vigil, ["--config", str(config_file), "topics", "create"])
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    return outputs


def run(config_file: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(vigil, ["--config", str(config_file), *args])
    return result.exit_code, result.stdout, result.stderr


def test_topics_create_twice_creates_once_then_changes_nothing(
    created: list[str], admin: AdminClient, prefix: str
) -> None:
    first, second = created
    assert f"{len(Topic)} created, 0 reconfigured" in first
    assert f"0 created, 0 reconfigured, {len(Topic)} already as specified" in second
    statuses = describe(admin, Topology(prefix, PARTITIONS))
    assert {s.state for s in statuses} == {TopicState.OK}
    assert {s.actual_partitions for s in statuses} == {PARTITIONS}


def test_describe_of_created_topics_exits_zero(created: list[str], config_file: Path) -> None:
    code, out, _ = run(config_file, "topics", "describe", "--json")
    document = json.loads(out)
    assert code == 0
    assert document["ok"] is True
    assert len(document["topics"]) == len(Topic)


def test_describe_with_wrong_partition_count_exits_one_and_says_repartition(
    created: list[str], config_file: Path, prefix: str
) -> None:
    code, out, err = run(config_file, "topics", "describe", "--partitions", "3")
    assert code == 1
    assert f"{prefix}events: has 2 partitions, expected 3" in err
    assert "offline repartition" in err
    assert "partitions_drifted" in out


def test_create_with_wrong_partition_count_refuses_and_adds_no_partitions(
    created: list[str], config_file: Path, admin: AdminClient, prefix: str
) -> None:
    code, _, err = run(config_file, "topics", "create", "--partitions", "3")
    assert code == 1
    assert "offline repartition" in err
    statuses = describe(admin, Topology(prefix, PARTITIONS))
    assert {s.actual_partitions for s in statuses} == {PARTITIONS}


def test_check_topology_refuses_drifted_partition_count(
    created: list[str], admin: AdminClient, prefix: str
) -> None:
    with pytest.raises(TopologyError, match="offline repartition"):
        check_topology(admin, Topology(prefix, 4), [Topic.EVENTS])
    statuses = check_topology(admin, Topology(prefix, PARTITIONS), [Topic.EVENTS, Topic.TICKS])
    assert [s.topic for s in statuses] == [Topic.EVENTS, Topic.TICKS]


def test_check_topology_on_missing_topics_names_the_create_command(
    admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    topology = Topology(unique_name("t-missing") + ".", 3)
    with pytest.raises(TopologyError) as caught:
        check_topology(admin, topology)
    message = str(caught.value)
    assert f"{topology.name(Topic.OUTBOX)}: missing" in message
    assert topology.create_command() in message


def test_describe_missing_topics_exits_one_with_the_fix(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    prefix = unique_name("t-none") + "."
    path = tmp_path / "vigil.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\ntopic_prefix = "{prefix}"\n'
        "partitions = 2\n"
    )
    code, _, err = run(path, "topics", "describe")
    assert code == 1
    assert f"{prefix}events: missing" in err
    assert f"fix: vigil --config {path} topics create --prefix {prefix} --partitions 2" in err


def test_config_drift_is_reported_then_reset_by_create(
    created: list[str], config_file: Path, admin: AdminClient, prefix: str
) -> None:
    name = f"{prefix}outbox"
    entry = ConfigEntry("delete.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)

    # The broker applies a config change to what it describes a moment after it acknowledged
    # it (KRaft metadata), so each side of the change is polled, not read once.
    drift = f"{name}: config drift delete.retention.ms=1000 (expected 604800000)"
    poll_until("the drift reported", lambda: drift in run(config_file, "topics", "describe")[2])
    report = ensure_topics(admin, Topology(prefix, PARTITIONS))
    assert report.reconfigured == [name]
    poll_until("no drift", lambda: run(config_file, "topics", "describe")[0] == 0)
    assert ensure_topics(admin, Topology(prefix, PARTITIONS)).reconfigured == []
