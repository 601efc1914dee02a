import shlex
from datetime import timedelta

import pytest

from pipeline.kafka.topics import (
    DLQ_MAX_REASON,
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC,
    SPECS,
    Cleanup,
    CoPartition,
    KeyKind,
    Partitioning,
    Topic,
    TopicSpec,
    Topology,
    dead_letter_headers,
)
from pipeline.rules.errors import ConfigError

pytestmark = pytest.mark.unit

# DESIGN.md §2, the topics table, transcribed: name, key, partitioning, cleanup.
DESIGN_TABLE = [
    ("commands", KeyKind.SUBJECT, "hash(key)", "delete"),
    ("command-results", KeyKind.REQUEST_ID, "hash(key)", "delete"),
    ("registry", KeyKind.WATCHER_KEY, "hash(subject)", "compact"),
    ("grants", KeyKind.GRANT_ID, "hash(key)", "compact"),
    ("watchers", KeyKind.WATCHER_KEY, "hash(source_id)", "compact"),
    ("events", KeyKind.SOURCE_ID, "hash(key)", "delete"),
    ("ticks", KeyKind.SOURCE_ID, "hash(key)", "delete"),
    ("ticker-state", KeyKind.WATCHER_KEY, "hash(source_id)", "compact"),
    ("watcher-state", KeyKind.WATCHER_KEY, "hash(source_id)", "compact"),
    ("outbox", KeyKind.DELIVERY_KEY, "hash(key)", "compact"),
    ("delivery-state", KeyKind.DELIVERY_KEY, "hash(key)", "compact"),
    ("receipts", KeyKind.WATCHER_KEY, "hash(source_id)", "delete"),
    ("definition-log", KeyKind.WATCHER_KEY, "hash(subject)", "delete"),
    ("lifecycle", KeyKind.WATCHER_KEY, "hash(key)", "compact"),
    ("notifications", KeyKind.SUBJECT, "hash(key)", "delete"),
    ("dead-letter", KeyKind.ORIGINAL_KEY, "hash(key)", "delete"),
    ("schemas", KeyKind.FINGERPRINT, "hash(key)", "compact"),
    ("keys", KeyKind.KEY_OWNER, "hash(subject)", "compact"),
    # Issue 18's extension: a redeliver command's request, for the member holding the key.
    ("redeliveries", KeyKind.DELIVERY_KEY, "hash(key)", "delete"),
]

SOURCES = {"watchers", "events", "ticks", "ticker-state", "watcher-state", "receipts"}
DELIVERIES = {"outbox", "delivery-state", "redeliveries"}
SEVEN_DAYS_MS = str(7 * 24 * 3600 * 1000)


def test_specs_cover_exactly_the_design_topics() -> None:
    assert {t.value for t in SPECS} == {row[0] for row in DESIGN_TABLE}


@pytest.mark.parametrize(("name", "key", "partitioning", "cleanup"), DESIGN_TABLE)
def test_spec_matches_design_row(name: str, key: KeyKind, partitioning: str, cleanup: str) -> None:
    spec = SPECS[Topic(name)]
    assert spec.key is key
    assert spec.partitioning is Partitioning(partitioning)
    assert spec.cleanup is Cleanup(cleanup)
    assert spec.configs()["cleanup.policy"] == cleanup


def test_co_partitioned_groups_are_the_design_groups() -> None:
    by_group = {
        group: {s.topic.value for s in SPECS.values() if s.group is group} for group in CoPartition
    }
    assert by_group == {CoPartition.SOURCES: SOURCES, CoPartition.DELIVERIES: DELIVERIES}


@pytest.mark.parametrize("spec", [s for s in SPECS.values() if s.cleanup is Cleanup.COMPACT])
def test_compacted_topic_keeps_tombstones_a_week_and_bounds_compaction_lag(spec: TopicSpec) -> None:
    configs = spec.configs()
    assert configs["delete.retention.ms"] == SEVEN_DAYS_MS
    assert int(configs["min.compaction.lag.ms"]) >= 0
    max_lag = int(configs["max.compaction.lag.ms"])
    assert 0 < max_lag <= int(SEVEN_DAYS_MS)
    assert int(configs["segment.ms"]) <= max_lag
    assert "retention.ms" not in configs


@pytest.mark.parametrize("spec", [s for s in SPECS.values() if s.cleanup is Cleanup.DELETE])
def test_delete_topic_has_a_retention(spec: TopicSpec) -> None:
    configs = spec.configs()
    assert spec.retention is not None
    assert configs["retention.ms"] == str(int(spec.retention.total_seconds() * 1000))
    assert int(configs["segment.ms"]) <= int(configs["retention.ms"])


def test_command_results_retention_is_short() -> None:
    retention = SPECS[Topic.COMMAND_RESULTS].retention
    assert retention is not None
    assert retention <= timedelta(days=1)


def test_topology_names_use_the_prefix_and_map_back() -> None:
    topology = Topology(prefix="acme.vigil.", partitions=4)
    assert topology.name(Topic.EVENTS) == "acme.vigil.events"
    assert topology.topic_of("acme.vigil.dead-letter") is Topic.DEAD_LETTER
    assert topology.topic_of("other.events") is None
    assert topology.topic_of("acme.vigil.nope") is None
    assert [s.topic for s in topology] == list(Topic)


def test_topology_default_is_twelve_partitions_and_vigil_prefix() -> None:
    topology = Topology()
    assert topology.name(Topic.OUTBOX) == "vigil.outbox"
    assert {topology.partitions_for(t) for t in Topic} == {12}


def test_override_on_an_ungrouped_topic_changes_only_that_topic() -> None:
    topology = Topology(partitions=4, overrides={Topic.GRANTS: 1})
    assert topology.partitions_for(Topic.GRANTS) == 1
    assert topology.partitions_for(Topic.EVENTS) == 4


@pytest.mark.parametrize("topic", [Topic.TICKS, Topic.DELIVERY_STATE])
def test_override_that_splits_a_co_partitioned_group_is_refused(topic: Topic) -> None:
    with pytest.raises(ConfigError, match="co-partitioned"):
        Topology(partitions=4, overrides={topic: 8})


def test_zero_partitions_is_refused() -> None:
    with pytest.raises(ConfigError, match="partitions"):
        Topology(partitions=0)


def test_create_command_round_trips_through_a_shell() -> None:
    command = Topology(prefix="my team.", partitions=3).create_command()
    assert shlex.split(command) == [
        "vigil", "topics", "create", "--prefix", "my team.", "--partitions", "3"
    ]  # fmt: skip


def test_dead_letter_headers_carry_reason_and_origin() -> None:
    headers = dict(dead_letter_headers("bad_marker: x", "vigil.events", 3, 42))
    assert headers == {
        DLQ_REASON: b"bad_marker: x",
        DLQ_TOPIC: b"vigil.events",
        DLQ_PARTITION: b"3",
        DLQ_OFFSET: b"42",
    }
    assert {DLQ_REASON, DLQ_TOPIC, DLQ_PARTITION, DLQ_OFFSET} == {
        "vigil.dlq.reason",
        "vigil.dlq.topic",
        "vigil.dlq.partition",
        "vigil.dlq.offset",
    }


def test_dead_letter_headers_of_any_text_are_utf8_and_a_long_reason_is_cut() -> None:
    headers = dict(dead_letter_headers("bad \udcff" + "x" * 5000, "vigil.\ud800", 0, 7))
    assert headers[DLQ_REASON] == ("bad ?" + "x" * (DLQ_MAX_REASON - 5)).encode()
    assert headers[DLQ_TOPIC] == b"vigil.?"
    assert headers[DLQ_OFFSET] == b"7"


def test_the_keys_topic_drops_a_shredded_key_within_two_hours() -> None:
    configs = SPECS[Topic.KEYS].configs()
    assert configs["cleanup.policy"] == "compact"
    assert int(configs["max.compaction.lag.ms"]) + int(configs["segment.ms"]) <= 2 * 3600 * 1000
    assert SPECS[Topic.KEYS].record_lifetime() == timedelta(hours=2)


def test_sealed_topics_are_every_vigil_topic_with_subject_fields_and_events_is_not() -> None:
    sealed = {s.topic for s in SPECS.values() if s.sealed}
    assert Topic.EVENTS not in sealed
    assert sealed == {
        Topic.COMMANDS,
        Topic.COMMAND_RESULTS,
        Topic.REGISTRY,
        Topic.WATCHERS,
        Topic.TICKS,
        Topic.OUTBOX,
        Topic.RECEIPTS,
        Topic.DEFINITION_LOG,
        Topic.NOTIFICATIONS,
        Topic.DEAD_LETTER,
    }
    longest = max(sealed, key=lambda t: SPECS[t].record_lifetime())
    assert (longest, SPECS[longest].record_lifetime()) == (Topic.DEFINITION_LOG, timedelta(days=91))
