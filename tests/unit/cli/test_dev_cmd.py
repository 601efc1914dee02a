"""``vigil dev --broker``: the choice, its ``VIGIL_BROKER`` variable (what ``make run``
passes on) and the default (Kafka with Java, else Tansu) — decided before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli.group import vigil
from pipeline.ops.dev_stack import DevPorts, Servers, default_broker, write_config

pytestmark = pytest.mark.unit


def test_vigil_broker_variable_reaches_the_option_and_is_checked() -> None:
    result = CliRunner().invoke(vigil, ["dev"], env={"VIGIL_BROKER": "redpanda"})
    assert result.exit_code == 2
    assert "--broker" in result.output and "'kafka', 'tansu'" in result.output


def test_default_broker_is_tansu_without_java_and_kafka_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert default_broker() == "tansu"
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\n", encoding="utf-8")
    java.chmod(0o755)
    assert default_broker() == "kafka"


def test_makefile_run_is_vigil_dev_so_it_honours_vigil_broker() -> None:
    makefile = (Path(__file__).resolve().parents[3] / "Makefile").read_text(encoding="utf-8")
    assert "@exec $(VENV)/bin/vigil dev\n" in makefile


def test_brokers_3_refuses_tansu_before_anything_starts() -> None:
    result = CliRunner().invoke(vigil, ["dev", "--brokers", "3", "--broker", "tansu"])
    assert result.exit_code == 2
    assert "a cluster (--brokers > 1) runs Apache Kafka" in result.output


def test_a_cluster_of_3_takes_six_consecutive_ports_and_replicates_3(tmp_path: Path) -> None:
    ports = DevPorts.choose(brokers=3)
    first = ports.kafka
    assert ports.bootstrap == f"127.0.0.1:{first},127.0.0.1:{first + 2},127.0.0.1:{first + 4}"
    assert ports.redis not in range(first, first + 6)
    config = write_config(tmp_path, ports, "token", 3).read_text(encoding="utf-8")
    assert f'bootstrap_servers = "{ports.bootstrap}"' in config
    assert "replication_factor = 3\n" in config
    servers = Servers(tmp_path, ports, tmp_path / "log")
    stop = [cmd for cmd in servers.stop_commands() if "kafka.sh" in cmd[-2]]
    assert stop[0][-1] == "cluster-stop"
    assert f"KAFKA_CLUSTER_PORT={first}" in stop[0]
