"""docker-compose.yml cannot run here (no Docker engine): check its structure instead — the
services exist, Kafka is a consistent one-node KRaft setup, ports and mounts line up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.ops.health import PROCESS_PORT_OFFSETS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def _listener_names(value: str) -> list[str]:
    return [item.split("://", 1)[0] for item in value.split(",")]


def test_compose_declares_kafka_redis_prometheus_grafana(compose: dict[str, Any]) -> None:
    assert {"kafka", "redis", "prometheus", "grafana"} <= set(compose["services"])
    images = {name: svc["image"] for name, svc in compose["services"].items()}
    assert images["kafka"].startswith("apache/kafka:")
    assert images["redis"].startswith("redis")
    assert images["prometheus"].startswith("prom/prometheus")
    assert images["grafana"].startswith("grafana/grafana")


def test_kafka_service_is_a_consistent_one_node_kraft_setup(compose: dict[str, Any]) -> None:
    env = compose["services"]["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node = env["KAFKA_NODE_ID"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{node}@")
    assert "KAFKA_ZOOKEEPER_CONNECT" not in env

    listeners = _listener_names(env["KAFKA_LISTENERS"])
    protocols = dict(
        item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    )
    assert set(listeners) <= set(protocols)
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in listeners
    advertised = _listener_names(env["KAFKA_ADVERTISED_LISTENERS"])
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] not in advertised
    assert set(advertised) <= set(listeners)

    controller_port = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].rsplit(":", 1)[1]
    assert (
        f"{env['KAFKA_CONTROLLER_LISTENER_NAMES']}://:{controller_port}" in env["KAFKA_LISTENERS"]
    )
    for setting in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[setting] == "1", setting


def test_compose_publishes_the_default_ports(compose: dict[str, Any]) -> None:
    def published(service: str) -> set[str]:
        return {str(p).split(":")[-2] for p in compose["services"][service]["ports"]}

    assert "9092" in published("kafka")
    assert (
        "localhost:9092"
        in compose["services"]["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    )
    assert "6379" in published("redis")
    assert "9090" in published("prometheus")
    assert "3000" in published("grafana")
    assert "9093" in published("alertmanager")


def test_no_service_listens_on_all_interfaces(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_prometheus_sends_alerts_to_alertmanager_and_scrapes_every_process(
    compose: dict[str, Any],
) -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    managers = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert managers == ["alertmanager:9093"]
    mounted = compose["services"]["alertmanager"]["volumes"][0].split(":")[0]
    routes = yaml.safe_load((ROOT / mounted).read_text())
    assert routes["route"]["receiver"] in {r["name"] for r in routes["receivers"]}
    (vigil,) = [job for job in config["scrape_configs"] if job["job_name"] == "vigil"]
    targets = set(vigil["static_configs"][0]["targets"])
    expected = {f"{name}:{9464 + offset}" for name, offset in PROCESS_PORT_OFFSETS.items()}
    assert targets == expected


def test_prometheus_mounts_a_config_that_exists_and_scrapes(compose: dict[str, Any]) -> None:
    mounts = compose["services"]["prometheus"]["volumes"]
    host_paths = [
        m.split(":")[0] for m in mounts if m.endswith("/etc/prometheus/prometheus.yml:ro")
    ]
    assert host_paths, mounts
    config = yaml.safe_load((ROOT / host_paths[0]).read_text())
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert "vigil" in jobs
