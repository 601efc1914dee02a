"""Every Kafka topic vigil uses, in one place: names, keys, partitioning, cleanup and configs.

Owns :class:`TopicSpec`, :class:`Topology` (a prefix and partition counts applied: full names and
broker configs; every process gets its topic names here, never from a literal) and the header
convention of ``dead-letter`` records. Leaves out talking to the broker (``admin``) and choosing
a partition for a key (``partitioner``).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from pipeline.rules.errors import ConfigError
from pipeline.rules.retention import EVIDENCE_TOPIC_RETENTION, LEDGER_TOPIC_RETENTION

__all__ = [
    "COMPACTED_CONFIGS",
    "DEFAULT_PARTITIONS",
    "DEFAULT_PREFIX",
    "DLQ_MAX_REASON",
    "DLQ_OFFSET",
    "DLQ_PARTITION",
    "DLQ_REASON",
    "DLQ_TOPIC",
    "KEYS_CONFIGS",
    "SPECS",
    "Cleanup",
    "CoPartition",
    "KeyKind",
    "Partitioning",
    "Topic",
    "TopicSpec",
    "Topology",
    "dead_letter_headers",
]

DEFAULT_PREFIX: Final = "vigil."
DEFAULT_PARTITIONS: Final = 12

# Dead letters keep the original key and value; these headers say where they came from.
DLQ_REASON: Final = "vigil.dlq.reason"
DLQ_TOPIC: Final = "vigil.dlq.topic"
DLQ_PARTITION: Final = "vigil.dlq.partition"
DLQ_OFFSET: Final = "vigil.dlq.offset"


DLQ_MAX_REASON: Final = 1000
"""Characters of a reason its header keeps: enough to act on, never a payload copy."""


def dead_letter_headers(
    reason: str, topic: str, partition: int, offset: int
) -> list[tuple[str, bytes]]:
    """Headers of a ``dead-letter`` record, the one encoding every writer uses: UTF-8 text (a
    character UTF-8 cannot carry, such as a lone surrogate from a hostile record, becomes
    ``?``: a dead letter is never refused for its reason), the reason cut at
    :data:`DLQ_MAX_REASON` characters, decimal numbers."""
    return [
        (DLQ_REASON, reason[:DLQ_MAX_REASON].encode("utf-8", "replace")),
        (DLQ_TOPIC, topic.encode("utf-8", "replace")),
        (DLQ_PARTITION, str(partition).encode("ascii")),
        (DLQ_OFFSET, str(offset).encode("ascii")),
    ]


class Topic(StrEnum):
    """A topic's name without the prefix."""

    COMMANDS = "commands"
    COMMAND_RESULTS = "command-results"
    REGISTRY = "registry"
    GRANTS = "grants"
    WATCHERS = "watchers"
    EVENTS = "events"
    TICKS = "ticks"
    TICKER_STATE = "ticker-state"
    WATCHER_STATE = "watcher-state"
    OUTBOX = "outbox"
    DELIVERY_STATE = "delivery-state"
    REDELIVERIES = "redeliveries"
    RECEIPTS = "receipts"
    DEFINITION_LOG = "definition-log"
    LIFECYCLE = "lifecycle"
    NOTIFICATIONS = "notifications"
    DEAD_LETTER = "dead-letter"
    SCHEMAS = "schemas"
    KEYS = "keys"


class KeyKind(StrEnum):
    """What a record key is (all keys are UTF-8; arrays are RFC 8785 JSON)."""

    SUBJECT = "subject"
    REQUEST_ID = "request_id"
    WATCHER_KEY = "watcher_key"
    GRANT_ID = "grant_id"
    SOURCE_ID = "source_id"
    DELIVERY_KEY = "delivery_key"
    ORIGINAL_KEY = "original_key"
    FINGERPRINT = "fingerprint"  # a schema's CRC-64-AVRO fingerprint, lowercase hex
    KEY_OWNER = "key_owner"  # a subject, or a watcher version (pipeline.rules.data_keys)


class Partitioning(StrEnum):
    """What the partition is computed from (always Java's murmur2 rule)."""

    KEY = "hash(key)"
    SOURCE_ID = "hash(source_id)"
    SUBJECT = "hash(subject)"


class Cleanup(StrEnum):
    DELETE = "delete"
    COMPACT = "compact"


class CoPartition(StrEnum):
    """Topics whose partition *p* must hold the same keys: they share one partition count."""

    SOURCES = "sources"  # the evaluator's inputs and tables, by source id
    DELIVERIES = "deliveries"  # the outbox and delivery's state, by delivery key


def _ms(value: timedelta) -> str:
    return str(int(value.total_seconds() * 1000))


COMPACTED_CONFIGS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "cleanup.policy": "compact",
        # Long, so a restore that reads from the start never misses a tombstone (§10).
        "delete.retention.ms": _ms(timedelta(days=7)),
        # Recent records stay readable as written for a minute; erased data is gone in a day.
        "min.compaction.lag.ms": _ms(timedelta(minutes=1)),
        "max.compaction.lag.ms": _ms(timedelta(days=1)),
        # Only closed segments compact: roll often enough for the lag bound to hold.
        "segment.ms": _ms(timedelta(hours=6)),
    }
)


# ``keys``: a shredded key's wrapped record must leave the log soon (DESIGN §10): small
# segments and a short lag bound, so the cleaner removes it within two hours.
KEYS_CONFIGS: Final[Mapping[str, str]] = MappingProxyType(
    {
        **COMPACTED_CONFIGS,
        "min.compaction.lag.ms": "0",
        "max.compaction.lag.ms": _ms(timedelta(hours=1)),
        "segment.ms": _ms(timedelta(hours=1)),
    }
)


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic of DESIGN.md §2: what it holds and how the broker keeps it. ``sealed``: its
    records carry subject fields as ciphertext under data keys (DESIGN §10)."""

    topic: Topic
    key: KeyKind
    partitioning: Partitioning
    cleanup: Cleanup
    retention: timedelta | None = None  # delete topics only
    group: CoPartition | None = None
    sealed: bool = False

    def __post_init__(self) -> None:
        if (self.cleanup is Cleanup.DELETE) != (self.retention is not None):
            raise ValueError(f"{self.topic}: delete topics, and only they, have a retention")

    def configs(self) -> dict[str, str]:
        """The broker configs vigil sets on this topic (and checks for drift)."""
        if self.topic is Topic.KEYS:
            return dict(KEYS_CONFIGS)
        if self.cleanup is Cleanup.COMPACT:
            return dict(COMPACTED_CONFIGS)
        assert self.retention is not None
        segment = min(self.retention, timedelta(days=1))
        return {
            "cleanup.policy": "delete",
            "retention.ms": _ms(self.retention),
            "segment.ms": _ms(segment),
        }

    def record_lifetime(self) -> timedelta:
        """The longest a record written now can stay in the log: a delete topic keeps a segment
        until its newest record is past retention; a compacted one removes a superseded or
        tombstoned value within the lag bound once its segment has rolled."""
        configs = self.configs()
        segment = timedelta(milliseconds=int(configs["segment.ms"]))
        if self.retention is not None:
            return self.retention + segment
        return timedelta(milliseconds=int(configs["max.compaction.lag.ms"])) + segment


def _delete(
    topic: Topic,
    key: KeyKind,
    retention: timedelta,
    partitioning: Partitioning = Partitioning.KEY,
    group: CoPartition | None = None,
    *,
    sealed: bool = False,
) -> TopicSpec:
    return TopicSpec(topic, key, partitioning, Cleanup.DELETE, retention, group, sealed)


def _compact(
    topic: Topic,
    key: KeyKind,
    partitioning: Partitioning = Partitioning.KEY,
    group: CoPartition | None = None,
    *,
    sealed: bool = False,
) -> TopicSpec:
    return TopicSpec(topic, key, partitioning, Cleanup.COMPACT, None, group, sealed)


_DAY = timedelta(days=1)
_SRC, _DLV = CoPartition.SOURCES, CoPartition.DELIVERIES
_BY_SOURCE = Partitioning.SOURCE_ID

SPECS: Final[Mapping[Topic, TopicSpec]] = MappingProxyType(
    {
        spec.topic: spec
        for spec in (
            _delete(Topic.COMMANDS, KeyKind.SUBJECT, 7 * _DAY, sealed=True),
            _delete(Topic.COMMAND_RESULTS, KeyKind.REQUEST_ID, timedelta(hours=1), sealed=True),
            _compact(Topic.REGISTRY, KeyKind.WATCHER_KEY, Partitioning.SUBJECT, sealed=True),
            _compact(Topic.GRANTS, KeyKind.GRANT_ID),
            _compact(Topic.WATCHERS, KeyKind.WATCHER_KEY, _BY_SOURCE, _SRC, sealed=True),
            _delete(Topic.EVENTS, KeyKind.SOURCE_ID, 7 * _DAY, group=_SRC),
            _delete(Topic.TICKS, KeyKind.SOURCE_ID, 7 * _DAY, group=_SRC, sealed=True),
            _compact(Topic.TICKER_STATE, KeyKind.WATCHER_KEY, _BY_SOURCE, _SRC),
            _compact(Topic.WATCHER_STATE, KeyKind.WATCHER_KEY, _BY_SOURCE, _SRC),
            _compact(Topic.OUTBOX, KeyKind.DELIVERY_KEY, group=_DLV, sealed=True),
            _compact(Topic.DELIVERY_STATE, KeyKind.DELIVERY_KEY, group=_DLV),
            # A redeliver command's request, for the delivery member that holds the key.
            _delete(Topic.REDELIVERIES, KeyKind.DELIVERY_KEY, 7 * _DAY, group=_DLV),
            _delete(
                Topic.RECEIPTS,
                KeyKind.WATCHER_KEY,
                EVIDENCE_TOPIC_RETENTION,
                _BY_SOURCE,
                _SRC,
                sealed=True,
            ),
            _delete(
                Topic.DEFINITION_LOG,
                KeyKind.WATCHER_KEY,
                90 * _DAY,
                Partitioning.SUBJECT,
                sealed=True,
            ),
            _compact(Topic.LIFECYCLE, KeyKind.WATCHER_KEY),
            _delete(Topic.NOTIFICATIONS, KeyKind.SUBJECT, LEDGER_TOPIC_RETENTION, sealed=True),
            _delete(Topic.DEAD_LETTER, KeyKind.ORIGINAL_KEY, 30 * _DAY, sealed=True),
            _compact(Topic.SCHEMAS, KeyKind.FINGERPRINT),
            _compact(Topic.KEYS, KeyKind.KEY_OWNER, Partitioning.SUBJECT),
        )
    }
)


@dataclass(frozen=True, slots=True)
class Topology:
    """The topics of one vigil deployment: a prefix plus partition counts.

    ``partitions`` applies to every topic; ``overrides`` may change single topics, but every
    topic of a co-partitioned group must keep one count (else :class:`ConfigError`).
    ``replication_factor`` -1 takes the broker's ``default.replication.factor``;
    ``min_insync_replicas`` None takes :meth:`min_insync`'s rule.
    """

    prefix: str = DEFAULT_PREFIX
    partitions: int = DEFAULT_PARTITIONS
    replication_factor: int = -1
    overrides: Mapping[Topic, int] = field(default_factory=dict)
    min_insync_replicas: int | None = None

    def __post_init__(self) -> None:
        counts = [self.partitions, *self.overrides.values()]
        if any(count < 1 for count in counts):
            raise ConfigError("partitions: a topic has at least one partition")
        for group in CoPartition:
            seen = {self.partitions_for(s.topic) for s in SPECS.values() if s.group is group}
            if len(seen) > 1:
                raise ConfigError(
                    f"partitions: co-partitioned topics ({group}) need one count, got {seen}"
                )

    def name(self, topic: Topic) -> str:
        """The full topic name, e.g. ``vigil.events``."""
        return f"{self.prefix}{topic.value}"

    def partitions_for(self, topic: Topic) -> int:
        return self.overrides.get(topic, self.partitions)

    def spec(self, topic: Topic) -> TopicSpec:
        return SPECS[topic]

    def min_insync(self, replicas: int) -> int | None:
        """The ``min.insync.replicas`` of a topic with ``replicas`` replicas (DESIGN §10
        "Replicated safely"): as configured, else replicas − 1 from three replicas on, so an
        acknowledged write outlives any one broker and one broker down stalls nothing; None
        (fewer replicas, nothing configured) leaves the broker's default."""
        if self.min_insync_replicas is not None:
            return self.min_insync_replicas
        return replicas - 1 if replicas >= 3 else None

    def configs(self, topic: Topic, replicas: int) -> dict[str, str]:
        """The broker configs vigil sets on ``topic`` (and checks for drift) when it has
        ``replicas`` replicas: its spec's, and :meth:`min_insync`."""
        configs = SPECS[topic].configs()
        wanted = self.min_insync(replicas)
        if wanted is not None:
            configs["min.insync.replicas"] = str(wanted)
        return configs

    def topic_of(self, name: str) -> Topic | None:
        """The topic a full name belongs to, or None when it is not one of ours."""
        if not name.startswith(self.prefix):
            return None
        try:
            return Topic(name[len(self.prefix) :])
        except ValueError:
            return None

    def __iter__(self) -> Iterator[TopicSpec]:
        return iter(SPECS.values())

    def create_command(self) -> str:
        """The CLI command that creates (or repairs the configs of) this topology."""
        return shlex.join(
            [
                "vigil",
                "topics",
                "create",
                "--prefix",
                self.prefix,
                "--partitions",
                str(self.partitions),
            ]
        )
