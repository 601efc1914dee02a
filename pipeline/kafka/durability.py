"""What on a cluster would lose acknowledged data or stall transactions, in one line each (DESIGN
§10 "Replicated safely").

Owns :class:`BrokerSettings` (:func:`broker_settings`), :func:`findings` (what ``vigil topics``
and ``vigil doctor`` print, each line naming the setting that fixes it) and
:func:`replication_refusal`. Leaves out creating topics (``admin``) and printing.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType

from pipeline.kafka.failover import ride_out
from pipeline.kafka.failures import BrokerFailure, ErrorKind, answer

__all__ = [
    "OFFSETS_TOPIC",
    "TRANSACTION_LOG",
    "BrokerSettings",
    "InternalTopic",
    "broker_settings",
    "cluster_findings",
    "findings",
    "replication_refusal",
]

TRANSACTION_LOG: Final = "__transaction_state"
OFFSETS_TOPIC: Final = "__consumer_offsets"
SAFE_REPLICAS: Final = 3  # Kafka's guidance for exactly-once: 3 replicas, min ISR 2, acks=all
_TIMEOUT_S: Final = 15.0
_BROKER_KEYS: Final = (
    "default.replication.factor",
    "min.insync.replicas",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "offsets.topic.replication.factor",
    "unclean.leader.election.enable",
)


class TopicLayout(Protocol):
    """What :func:`findings` reads of a topic (``pipeline.kafka.admin.TopicStatus`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def replicas(self) -> int | None: ...
    @property
    def min_insync(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """``__transaction_state`` or ``__consumer_offsets`` as the cluster has it."""

    name: str
    replicas: int | None  # None: not created yet (the broker settings will decide)
    min_insync: int | None


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """The cluster's size and the broker settings that decide what survives a broker loss."""

    brokers: int
    configs: dict[str, str] = field(default_factory=dict)  # of one broker: _BROKER_KEYS
    internal: dict[str, InternalTopic] = field(default_factory=dict)

    def number(self, key: str, default: int = 1) -> int:
        value = self.configs.get(key, "")
        return int(value) if value.lstrip("-").isdigit() else default

    @property
    def wanted_replicas(self) -> int:
        return min(SAFE_REPLICAS, self.brokers)


def _configs_of(admin: AdminClient, resource: ConfigResource, deadline: float) -> Any:
    what = f"describing {resource.name}"

    def once() -> Any:
        (future,) = admin.describe_configs([resource], request_timeout=_TIMEOUT_S).values()
        return answer(future, what, _TIMEOUT_S)

    return ride_out(once, what, deadline)


def broker_settings(admin: AdminClient, wait_s: float = _TIMEOUT_S) -> BrokerSettings | None:
    """The cluster's :class:`BrokerSettings`, waiting out leader moves up to ``wait_s``; None
    when the cluster does not describe its configs (ACLs, a broker without DescribeConfigs:
    the checks are then skipped)."""
    deadline = time.monotonic() + wait_s
    metadata = ride_out(lambda: admin.list_topics(timeout=_TIMEOUT_S), "listing brokers", deadline)
    brokers = sorted(metadata.brokers)
    internal = {
        name: meta
        for name, meta in metadata.topics.items()
        if name in (TRANSACTION_LOG, OFFSETS_TOPIC) and meta.error is None and meta.partitions
    }
    resources = [ConfigResource(ResourceType.BROKER, str(brokers[0]))] if brokers else []
    resources += [ConfigResource(ResourceType.TOPIC, name) for name in internal]
    try:
        described = {r.name: _configs_of(admin, r, deadline) for r in resources}
    except BrokerFailure as exc:
        if exc.kind is ErrorKind.PERMANENT:
            return None
        raise
    broker = described.get(str(brokers[0]), {}) if brokers else {}
    configs = {key: str(broker[key].value) for key in _BROKER_KEYS if key in broker}
    topics = {}
    for name in (TRANSACTION_LOG, OFFSETS_TOPIC):
        meta, entries = internal.get(name), described.get(name, {})
        min_isr = entries.get("min.insync.replicas")
        topics[name] = InternalTopic(
            name,
            min(len(p.replicas) for p in meta.partitions.values()) if meta else None,
            int(min_isr.value) if min_isr is not None else None,
        )
    return BrokerSettings(len(brokers), configs, topics)


def replication_refusal(settings: BrokerSettings, replication_factor: int) -> str | None:
    """Why creating topics with ``replication_factor`` (-1: the broker's default) on this
    cluster is refused, or None."""
    default = settings.number("default.replication.factor")
    if replication_factor != -1 or settings.brokers < 2 or default > 1:
        return None
    return (
        f"[kafka] replication_factor -1 takes the broker's default.replication.factor "
        f"{default} on a {settings.brokers}-broker cluster: one broker's loss would lose "
        f"acknowledged writes; set [kafka] replication_factor = {settings.wanted_replicas}"
    )


def findings(settings: BrokerSettings, topics: Iterable[TopicLayout] = ()) -> list[str]:
    """Every setting that would lose acknowledged data or stall transactions on this
    cluster, one line each with what to change (none on a one-broker cluster: nothing there
    is replicated, by design)."""
    if settings.brokers < 2:
        return []
    lines = [*_internal(settings), *_ours(settings, list(topics))]
    if settings.configs.get("unclean.leader.election.enable", "false").lower() == "true":
        lines.append(
            "unclean.leader.election.enable=true: a lagging replica may become leader and drop "
            "acknowledged writes; set unclean.leader.election.enable=false on the brokers"
        )
    return lines


def cluster_findings(admin: AdminClient, topics: Iterable[TopicLayout] = ()) -> list[str]:
    """:func:`findings` of the cluster ``admin`` talks to (none when it does not describe its
    configs)."""
    settings = broker_settings(admin)
    return [] if settings is None else findings(settings, topics)


def _internal(settings: BrokerSettings) -> list[str]:
    lines = []
    for name, replicas_key, min_isr_key in (
        (
            TRANSACTION_LOG,
            "transaction.state.log.replication.factor",
            "transaction.state.log.min.isr",
        ),
        (OFFSETS_TOPIC, "offsets.topic.replication.factor", "min.insync.replicas"),
    ):
        topic = settings.internal.get(name, InternalTopic(name, None, None))
        replicas = topic.replicas or settings.number(replicas_key)
        min_isr = topic.min_insync or settings.number(min_isr_key)
        existing = " (it exists: reassign its partitions too)" if topic.replicas else ""
        if replicas < settings.wanted_replicas:
            lines.append(
                f"{name}: replication {replicas} on a {settings.brokers}-broker cluster: a broker "
                f"loss loses it; set {replicas_key}={settings.wanted_replicas} on the brokers"
                f"{existing}"
            )
        elif replicas >= SAFE_REPLICAS and min_isr < 2:
            where = f"{min_isr_key}=2 on the brokers" + (
                f" and min.insync.replicas=2 on {name}" if topic.replicas else ""
            )
            lines.append(
                f"{name}: min ISR {min_isr} of {replicas} replicas: a write acknowledged by one "
                f"replica dies with it; set {where}"
            )
        elif min_isr >= replicas > 1:
            lines.append(
                f"{name}: min ISR {min_isr} of {replicas} replicas stalls it while one broker is "
                f"down; set {min_isr_key}={replicas - 1}"
            )
    return lines


def _ours(settings: BrokerSettings, topics: list[TopicLayout]) -> list[str]:
    default_isr = settings.number("min.insync.replicas")
    layouts = [(t.replicas, t.min_insync or default_isr) for t in topics if t.replicas is not None]
    want = settings.wanted_replicas
    thin = sorted({replicas for replicas, _ in layouts if replicas < want})
    weak = [replicas for replicas, isr in layouts if replicas >= SAFE_REPLICAS and isr < 2]
    stalling = [replicas for replicas, isr in layouts if 1 < replicas <= isr]
    lines = []
    if thin:
        count = sum(1 for replicas, _ in layouts if replicas < want)
        lines.append(
            f"{count} vigil topics replicated {'/'.join(map(str, thin))} on a "
            f"{settings.brokers}-broker cluster: a broker loss loses acknowledged writes; set "
            f"[kafka] replication_factor = {want} (existing topics: reassign their partitions)"
        )
    if weak:
        lines.append(
            f"{len(weak)} vigil topics with min ISR 1 of {weak[0]} replicas: a write "
            "acknowledged by one replica dies with it; run `vigil topics create` (min ISR = "
            "replicas - 1) or raise [kafka] min_insync_replicas"
        )
    if stalling:
        lines.append(
            f"{len(stalling)} vigil topics whose min ISR equals their replicas: one broker down "
            "stalls every write to them; set [kafka] min_insync_replicas below the replication "
            "factor and run `vigil topics create`"
        )
    return lines
