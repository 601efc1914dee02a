"""Creating vigil's topics and checking them for drift against their specs.

Owns :func:`ensure_topics` (idempotent: creates what is missing, sets drifted configs back, never
adds partitions, which would remap keys away from their state, DESIGN.md §6) and
:func:`check_topology` (every process, before it starts: a :class:`TopologyError` naming the
fixing command). Leaves out the specs (``topics``) and printing (``pipeline.cli``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

# The package re-exports these without listing them in __all__; import them where they live.
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

from pipeline.kafka.durability import broker_settings, replication_refusal
from pipeline.kafka.failover import FAILOVER_WAIT_S, ride_out
from pipeline.kafka.failures import answer, translate
from pipeline.kafka.properties import LOG, active
from pipeline.kafka.topics import Topic, TopicSpec, Topology
from pipeline.rules.errors import BrokerError, TopologyError

__all__ = [
    "REPARTITION_HINT",
    "ConfigDrift",
    "EnsureReport",
    "TopicState",
    "TopicStatus",
    "check_topology",
    "connect_admin",
    "describe",
    "ensure_topics",
]

_TIMEOUT_S = 30.0
REPARTITION_HINT = (
    "partition counts are fixed at creation (adding partitions would move keys away from "
    "their state): this needs an offline repartition"
)


class TopicState(StrEnum):
    """How a topic on the broker compares to its spec, worst first."""

    PARTITIONS_DRIFTED = "partitions_drifted"
    MISSING = "missing"
    CONFIGS_DRIFTED = "configs_drifted"
    OK = "ok"


@dataclass(frozen=True, slots=True)
class ConfigDrift:
    expected: str
    actual: str | None


@dataclass(frozen=True, slots=True)
class TopicStatus:
    """One topic as the broker has it, next to what its spec wants."""

    name: str
    topic: Topic
    expected_partitions: int
    actual_partitions: int | None  # None: the topic does not exist
    drifted_configs: Mapping[str, ConfigDrift] = field(default_factory=dict)
    replicas: int | None = None  # the fewest replicas of any partition
    min_insync: int | None = None  # its min.insync.replicas (the broker's default included)

    @property
    def state(self) -> TopicState:
        if self.actual_partitions is None:
            return TopicState.MISSING
        if self.actual_partitions != self.expected_partitions:
            return TopicState.PARTITIONS_DRIFTED
        if self.drifted_configs:
            return TopicState.CONFIGS_DRIFTED
        return TopicState.OK

    def problem(self) -> str | None:
        """What is wrong, in one line, or None."""
        state = self.state
        if state is TopicState.MISSING:
            return f"{self.name}: missing"
        if state is TopicState.PARTITIONS_DRIFTED:
            return (
                f"{self.name}: has {self.actual_partitions} partitions, "
                f"expected {self.expected_partitions}"
            )
        if state is TopicState.CONFIGS_DRIFTED:
            drifts = ", ".join(
                f"{key}={d.actual} (expected {d.expected})"
                for key, d in sorted(self.drifted_configs.items())
            )
            return f"{self.name}: config drift {drifts}"
        return None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state.value,
            "expected_partitions": self.expected_partitions,
            "actual_partitions": self.actual_partitions,
            "replicas": self.replicas,
            "min_insync_replicas": self.min_insync,
            "drifted_configs": {
                key: {"expected": d.expected, "actual": d.actual}
                for key, d in sorted(self.drifted_configs.items())
            },
        }


@dataclass(frozen=True, slots=True)
class EnsureReport:
    created: list[str]
    reconfigured: list[str]
    unchanged: list[str]


def connect_admin(bootstrap_servers: str, extra: Mapping[str, Any] | None = None) -> AdminClient:
    """An admin client with the configured ``[kafka.client]`` properties; librdkafka connects
    lazily, so this does no network I/O. Its log lines go to the ``librdkafka`` logger."""
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "logger": LOG,
        **active().for_admin(),
    }
    return AdminClient({**settings, **(extra or {})})


def _layouts(admin: AdminClient) -> dict[str, tuple[int, int]]:
    """(partition count, fewest replicas of a partition) of every topic the broker reports
    without error."""
    try:
        metadata = admin.list_topics(timeout=_TIMEOUT_S)
    except KafkaException as exc:
        raise translate(exc, "listing topics") from exc
    return {
        name: (len(meta.partitions), min(len(p.replicas) for p in meta.partitions.values()))
        for name, meta in metadata.topics.items()
        if meta.error is None and meta.partitions
    }


def _partition_counts(admin: AdminClient) -> dict[str, int]:
    """Partition count of every topic the broker reports without error."""
    return {name: count for name, (count, _) in _layouts(admin).items()}


def _configs(admin: AdminClient, names: Iterable[str]) -> dict[str, dict[str, str | None]]:
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    if not resources:
        return {}
    futures = admin.describe_configs(resources, request_timeout=_TIMEOUT_S)
    described: dict[str, dict[str, str | None]] = {}
    for resource, future in futures.items():
        entries: dict[str, ConfigEntry] = answer(future, f"describing {resource.name}", _TIMEOUT_S)
        described[resource.name] = {key: entry.value for key, entry in entries.items()}
    return described


def _drift(expected: Mapping[str, str], actual: Mapping[str, str | None]) -> dict[str, ConfigDrift]:
    return {
        key: ConfigDrift(value, actual.get(key))
        for key, value in expected.items()
        if actual.get(key) != value
    }


def describe(admin: AdminClient, topology: Topology) -> list[TopicStatus]:
    """Every topic of ``topology`` as the broker has it, in spec order; a leader or
    controller move is waited out (``pipeline.kafka.failover``)."""
    deadline = time.monotonic() + FAILOVER_WAIT_S
    return ride_out(lambda: _describe(admin, topology), "describing topics", deadline)


def _describe(admin: AdminClient, topology: Topology) -> list[TopicStatus]:
    layouts = _layouts(admin)
    configs = _configs(
        admin, [topology.name(s.topic) for s in topology if topology.name(s.topic) in layouts]
    )
    statuses = []
    for spec in topology:
        name = topology.name(spec.topic)
        count, replicas = layouts.get(name, (None, None))
        found = configs.get(name)
        min_insync = (found or {}).get("min.insync.replicas")
        statuses.append(
            TopicStatus(
                name=name,
                topic=spec.topic,
                expected_partitions=topology.partitions_for(spec.topic),
                actual_partitions=count,
                drifted_configs=(
                    _drift(topology.configs(spec.topic, replicas or 0), found)
                    if found is not None
                    else {}
                ),
                replicas=replicas,
                min_insync=int(min_insync) if min_insync and min_insync.isdigit() else None,
            )
        )
    return statuses


def _wait_visible(admin: AdminClient, expected: Mapping[str, int]) -> None:
    """Wait until metadata shows the new topics with all their partitions."""
    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        counts = _partition_counts(admin)
        if all(counts.get(name) == n for name, n in expected.items()):
            return
        if time.monotonic() > deadline:
            raise BrokerError(f"created topics did not appear in metadata: {sorted(expected)}")
        time.sleep(0.05)


def _create(admin: AdminClient, topology: Topology, specs: list[TopicSpec]) -> list[str]:
    new = [
        NewTopic(
            topology.name(spec.topic),
            num_partitions=topology.partitions_for(spec.topic),
            replication_factor=topology.replication_factor,
            config=topology.configs(spec.topic, topology.replication_factor),
        )
        for spec in specs
    ]
    if not new:
        return []
    created = []
    for name, future in admin.create_topics(new, request_timeout=_TIMEOUT_S).items():
        try:
            future.result(timeout=_TIMEOUT_S)
            created.append(name)
        except KafkaException as exc:
            # Another process created it between our look and our create: that is fine.
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise translate(exc, f"creating {name}") from exc
    _wait_visible(admin, {topology.name(s.topic): topology.partitions_for(s.topic) for s in specs})
    return created


def _reconfigure(admin: AdminClient, drifted: list[TopicStatus]) -> None:
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            status.name,
            incremental_configs=[
                ConfigEntry(key, d.expected, incremental_operation=AlterConfigOpType.SET)
                for key, d in status.drifted_configs.items()
            ],
        )
        for status in drifted
    ]
    if resources:
        for resource, future in admin.incremental_alter_configs(resources).items():
            answer(future, f"setting configs of {resource.name}", _TIMEOUT_S)


def _replication_resolved(admin: AdminClient, topology: Topology) -> Topology:
    """``topology`` with replication -1 made the broker's default, so new topics get their
    min ISR at creation; refused (:class:`TopologyError`) where that default would leave a
    multi-broker cluster's topics on one replica (``pipeline.kafka.durability``)."""
    if topology.replication_factor != -1:
        return topology
    settings = broker_settings(admin)
    if settings is None:
        return topology
    refusal = replication_refusal(settings, topology.replication_factor)
    if refusal is not None:
        raise TopologyError(refusal)
    default = settings.number("default.replication.factor")
    return dataclasses.replace(topology, replication_factor=default) if default > 0 else topology


def ensure_topics(admin: AdminClient, topology: Topology) -> EnsureReport:
    """Create missing topics and reset drifted configs; refuse a drifted partition count.

    Safe to run any number of times, and concurrently. Raises :class:`TopologyError` (after
    doing everything else) when a partition count has drifted.
    """
    statuses = describe(admin, topology)
    missing = [topology.spec(s.topic) for s in statuses if s.state is TopicState.MISSING]
    drifted = [s for s in statuses if s.drifted_configs]
    created = _create(
        admin, _replication_resolved(admin, topology) if missing else topology, missing
    )
    _reconfigure(admin, drifted)
    refused = [s for s in statuses if s.state is TopicState.PARTITIONS_DRIFTED]
    if refused:
        lines = "\n".join(f"  {s.problem()}" for s in refused)
        raise TopologyError(f"partition counts drifted:\n{lines}\n{REPARTITION_HINT}")
    touched = {s.name for s in drifted} | set(created)
    return EnsureReport(
        created=created,
        reconfigured=[s.name for s in drifted],
        unchanged=[s.name for s in statuses if s.name not in touched],
    )


def check_topology(
    admin: AdminClient, topology: Topology, topics: Iterable[Topic] | None = None
) -> list[TopicStatus]:
    """Refuse to start on missing topics or drifted partition counts (DESIGN.md §6).

    ``topics`` limits the check to what a process uses (default: all). Config drift is
    returned, not raised: it does not corrupt data, and ``vigil topics create`` resets it.
    """
    wanted = set(topics) if topics is not None else set(Topic)
    statuses = [s for s in describe(admin, topology) if s.topic in wanted]
    missing = [s for s in statuses if s.state is TopicState.MISSING]
    repartition = [s for s in statuses if s.state is TopicState.PARTITIONS_DRIFTED]
    if not missing and not repartition:
        return statuses
    lines = [f"  {s.problem()}" for s in (*missing, *repartition)]
    if missing:
        lines.append(f"create them with: {topology.create_command()}")
    if repartition:
        lines.append(REPARTITION_HINT)
    raise TopologyError("vigil topics are not ready:\n" + "\n".join(lines))
