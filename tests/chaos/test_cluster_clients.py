"""vigil's clients on a three-node cluster of its own (``kafka.sh cluster-start 3``): topics
replicated safely, the doctor naming an unsafe transaction log, ``vigil publish`` riding out
the loss of the node that leads most of its partitions, first try, within its default timeout,
and the reply channel and scans riding out the loss of their partition's leader.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType

from pipeline.kafka.durability import TRANSACTION_LOG
from pipeline.kafka.failover import FAILOVER_WAIT_S
from pipeline.kafka.scan import scan
from pipeline.kafka.tail import Tail
from tests.chaos.cluster import busiest_node, wait_in_sync
from tests.chaos.servers import OwnKafkaCluster, ServerError, worker_ports

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "vigil."
EVENTS = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnKafkaCluster]:
    port, _, _ = worker_ports(1)
    own = OwnKafkaCluster(port, tmp_path_factory.mktemp("cluster"))
    try:
        own.start()
        yield own
    finally:
        with contextlib.suppress(ServerError):
            own.stop()


@pytest.fixture(scope="module")
def env(cluster: OwnKafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A vigil configuration on the cluster, its topics created (replication 3)."""
    config = tmp_path_factory.mktemp("config") / "vigil.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{cluster.bootstrap}"\ntopic_prefix = "{PREFIX}"\n'
        "partitions = 6\nreplication_factor = 3\n",
        encoding="utf-8",
    )
    environ = {"PATH": "/usr/bin:/bin", "VIGIL_CONFIG": str(config), "HOME": str(config.parent)}
    done = _vigil(environ, "topics", "create")
    assert done.returncode == 0, done.stderr
    return environ


def _vigil(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli.main", *args],
        env=env,
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_topics_describe_shows_replication_3_and_min_isr_2_on_every_topic(
    env: dict[str, str],
) -> None:
    done = _vigil(env, "topics", "describe", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert document["ok"] and document["cluster"] == []
    layouts = {(t["replicas"], t["min_insync_replicas"]) for t in document["topics"]}
    assert layouts == {(3, 2)}, document["topics"]
    assert len(document["topics"]) == 19


def test_doctor_flags_a_transaction_log_whose_min_isr_is_1(
    cluster: OwnKafkaCluster, env: dict[str, str]
) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "doctor"})
    producer.init_transactions(60)  # the transaction state log exists from here on
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    _set_min_isr(admin, "1")
    try:
        done = _vigil(env, "doctor", "--json")
    finally:
        _set_min_isr(admin, "2")
    findings = json.loads(done.stdout)["checks"]
    cluster_lines = [f["detail"] for f in findings if f["check"] == "cluster"]
    assert done.returncode == 1
    assert [line.split(";")[0] for line in cluster_lines] == [
        f"{TRANSACTION_LOG}: min ISR 1 of 3 replicas: a write acknowledged by one replica dies "
        "with it"
    ], cluster_lines
    assert "transaction.state.log.min.isr=2" in cluster_lines[0]


def _set_min_isr(admin: AdminClient, value: str) -> None:
    entry = ConfigEntry("min.insync.replicas", value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, TRANSACTION_LOG, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def test_publish_while_the_busiest_node_is_killed_succeeds_first_try(
    cluster: OwnKafkaCluster, env: dict[str, str], tmp_path: Path
) -> None:
    lines = [
        json.dumps(
            {
                "source_id": f"src.{i % 12}",
                "event_type": "build.finished",
                "event_id": f"kill-{i}",
                "observed_at": "2026-12-03T00:00:00Z",
                "payload": {"n": i},
            }
        )
        for i in range(EVENTS)
    ]
    victim = busiest_node(cluster.bootstrap, PREFIX)
    cluster.kill(victim)
    started = time.monotonic()
    try:
        done = _vigil(env, "publish", "-", stdin="\n".join(lines) + "\n")
        took = time.monotonic() - started
    finally:
        cluster.start_node(victim)
    print(json.dumps({"killed_node": victim, "publish_s": round(took, 1)}))
    assert done.returncode == 0, done.stderr
    assert f"published {EVENTS}, rejected 0" in done.stderr
    wait_in_sync(cluster.bootstrap, PREFIX)


def test_reply_channel_and_scan_ride_out_their_leaders_kill(
    cluster: OwnKafkaCluster, env: dict[str, str]
) -> None:
    """The CI flake (issue 28 item 7): finding the end of a result partition while its leader
    is being replaced is a wait, not ``NOT_LEADER_FOR_PARTITION``; a scan likewise."""
    topic = f"{PREFIX}command-results"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    leader = admin.list_topics(topic, timeout=30).topics[topic].partitions[0].leader
    cluster.kill(leader)
    started = time.monotonic()
    try:
        tail = Tail(cluster.bootstrap, "cluster-test", FAILOVER_WAIT_S)
        try:
            end = tail.follow(topic, 0)
        finally:
            tail.close()
        followed = time.monotonic() - started
        scanned = sum(1 for _ in scan(cluster.bootstrap, topic))
    finally:
        cluster.start_node(leader)
    print(json.dumps({"killed_node": leader, "follow_s": round(followed, 1)}))
    assert end >= 0 and scanned >= 0
    wait_in_sync(cluster.bootstrap, PREFIX)


def test_publish_past_its_timeout_names_the_partition_not_the_create_command(
    cluster: OwnKafkaCluster, env: dict[str, str]
) -> None:
    """A deadline shorter than the cluster's failover: the error names a partition it could not
    write and what the cluster says of it, never "create the topics" (they exist)."""
    lines = [
        json.dumps(
            {
                "source_id": f"src.{i % 12}",
                "event_type": "build.finished",
                "event_id": f"short-{i}",
                "observed_at": "2026-12-03T00:00:00Z",
                "payload": {"n": i},
            }
        )
        for i in range(60)
    ]
    victim = busiest_node(cluster.bootstrap, PREFIX)
    cluster.kill(victim)
    try:
        done = _vigil(env, "publish", "--timeout", "3", "-", stdin="\n".join(lines) + "\n")
    finally:
        cluster.start_node(victim)
    assert done.returncode != 0, done.stderr
    assert re.search(r"vigil\.(events|schemas)\[\d+\]", done.stderr), done.stderr
    assert "waited up to 3s" in done.stderr, done.stderr
    assert "topics create" not in done.stderr, done.stderr
    wait_in_sync(cluster.bootstrap, PREFIX)
