"""Replicated safely (DESIGN §10): the min ISR vigil sets on its topics, and the one-line
findings of what on a cluster would lose acknowledged data or stall transactions."""

from dataclasses import dataclass

import pytest
from pydantic import ValidationError

from pipeline.config import KafkaConfig
from pipeline.kafka.durability import (
    OFFSETS_TOPIC,
    TRANSACTION_LOG,
    BrokerSettings,
    InternalTopic,
    findings,
    replication_refusal,
)
from pipeline.kafka.topics import Topic, Topology

pytestmark = pytest.mark.unit

SAFE_BROKER = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "offsets.topic.replication.factor": "3",
    "unclean.leader.election.enable": "false",
}


@dataclass
class Layout:
    name: str
    replicas: int | None
    min_insync: int | None


def cluster(brokers: int = 3, **configs: str) -> BrokerSettings:
    merged = {**SAFE_BROKER, **{k.replace("_", "."): v for k, v in configs.items()}}
    return BrokerSettings(brokers, merged, {})


@pytest.mark.parametrize(("replicas", "wanted"), [(1, None), (2, None), (3, 2), (5, 4)])
def test_min_insync_is_replicas_minus_one_from_three_replicas(
    replicas: int, wanted: int | None
) -> None:
    topology = Topology()
    assert topology.min_insync(replicas) == wanted
    configs = topology.configs(Topic.EVENTS, replicas)
    assert configs.get("min.insync.replicas") == (None if wanted is None else str(wanted))
    assert configs["cleanup.policy"] == "delete"  # the spec's configs stay


def test_configured_min_insync_wins_over_the_rule() -> None:
    topology = Topology(replication_factor=3, min_insync_replicas=3)
    assert topology.configs(Topic.OUTBOX, 3)["min.insync.replicas"] == "3"
    assert KafkaConfig(replication_factor=3, min_insync_replicas=1).topology().min_insync(3) == 1


def test_config_refuses_min_insync_above_replication() -> None:
    with pytest.raises(ValidationError, match="exceeds replication_factor"):
        KafkaConfig(replication_factor=3, min_insync_replicas=4)


def test_a_safe_three_broker_cluster_has_no_findings() -> None:
    topics = [Layout("vigil.events", 3, 2), Layout("vigil.outbox", 3, 2)]
    assert findings(cluster(), topics) == []


def test_one_broker_has_no_findings_whatever_its_settings() -> None:
    weak = BrokerSettings(1, {"transaction.state.log.min.isr": "1"}, {})
    assert findings(weak, [Layout("vigil.events", 1, 1)]) == []


def test_transaction_log_min_isr_one_is_one_line_naming_the_setting() -> None:
    settings = BrokerSettings(
        3, SAFE_BROKER, {TRANSACTION_LOG: InternalTopic(TRANSACTION_LOG, 3, 1)}
    )
    (line,) = findings(settings)
    assert line.startswith(f"{TRANSACTION_LOG}: min ISR 1 of 3 replicas")
    assert "transaction.state.log.min.isr=2" in line
    assert f"min.insync.replicas=2 on {TRANSACTION_LOG}" in line


def test_internal_topics_not_yet_created_are_judged_by_the_broker_settings() -> None:
    lines = findings(cluster(transaction_state_log_replication_factor="1"))
    assert len(lines) == 1
    assert "transaction.state.log.replication.factor=3" in lines[0]
    (offsets,) = findings(cluster(offsets_topic_replication_factor="2"))
    assert offsets.startswith(f"{OFFSETS_TOPIC}: replication 2")


def test_vigil_topics_thin_weak_or_stalling_each_get_one_line() -> None:
    thin = findings(cluster(), [Layout("a", 1, 1), Layout("b", 1, 1)])
    assert thin == [thin[0]] and thin[0].startswith("2 vigil topics replicated 1")
    assert "[kafka] replication_factor = 3" in thin[0]
    (weak,) = findings(cluster(), [Layout("a", 3, 1)])
    assert "min ISR 1 of 3" in weak and "vigil topics create" in weak
    (stalling,) = findings(cluster(), [Layout("a", 3, 3)])
    assert "one broker down stalls every write" in stalling
    assert "[kafka] min_insync_replicas" in stalling


def test_a_topic_without_its_own_min_isr_takes_the_broker_default() -> None:
    offsets, weak = findings(cluster(min_insync_replicas="1"), [Layout("a", 3, None)])
    assert offsets.startswith(f"{OFFSETS_TOPIC}: min ISR 1 of 3")  # it takes it too
    assert weak.startswith("1 vigil topics with min ISR 1 of 3")


def test_unclean_leader_election_is_flagged() -> None:
    (line,) = findings(cluster(unclean_leader_election_enable="true"))
    assert "unclean.leader.election.enable=false" in line


def test_replication_minus_one_refused_only_where_the_default_is_one_on_a_cluster() -> None:
    refusal = replication_refusal(cluster(default_replication_factor="1"), -1)
    assert refusal is not None
    assert "3-broker cluster" in refusal and "[kafka] replication_factor = 3" in refusal
    assert replication_refusal(cluster(), -1) is None  # default 3: fine
    assert replication_refusal(cluster(default_replication_factor="1"), 3) is None
    assert replication_refusal(cluster(1, default_replication_factor="1"), -1) is None
