"""Retention per watcher (DESIGN.md §10): at most the topic's, refused at creation when longer,
and enforced on read by ``retain_until``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipeline.kafka.topics import SPECS, Topic
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError
from pipeline.rules.retention import (
    EVIDENCE_TOPIC_RETENTION,
    LEDGER_TOPIC_RETENTION,
    retain_until,
    retained,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def definition(**privacy: Any) -> WatcherDefinition:
    body = {
        "watcher_id": "w-1",
        "purpose": "ops.alert",
        "source": {"kind": "event", "source_id": "s", "event_type": "t", "max_age": "10m"},
        "condition": {"exists": "x"},
        "delivery": {"target": "hook", "verb": "notify"},
        "expires_at": "2030-01-01T00:00:00Z",
        "privacy": privacy,
    }
    return WatcherDefinition.from_json(body, tenant_id="acme", user_id="ann")


def test_the_caps_are_the_topics_retentions() -> None:
    assert SPECS[Topic.RECEIPTS].retention == EVIDENCE_TOPIC_RETENTION
    assert SPECS[Topic.NOTIFICATIONS].retention == LEDGER_TOPIC_RETENTION


@pytest.mark.parametrize(
    ("field", "value"),
    [("evidence_retention", "31d"), ("delivery_retention", "31d")],
)
def test_a_retention_longer_than_its_topic_is_refused_at_creation(field: str, value: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        definition(**{field: value})
    assert caught.value.field == f"privacy.{field}"
    assert "30d" in caught.value.message


def test_retentions_up_to_the_topic_are_accepted() -> None:
    accepted = definition(evidence_retention="30d", delivery_retention="1h")
    assert accepted.privacy.evidence_retention == timedelta(days=30)


def test_a_record_is_readable_until_its_retain_until_and_never_after() -> None:
    until = retain_until(NOW, timedelta(days=7))
    assert until == NOW + timedelta(days=7)
    assert retained(until, until - timedelta(microseconds=1))
    assert not retained(until, until)
    assert retained(None, NOW + timedelta(days=3650)), "older records: the topic bounds them"
    assert retain_until(datetime.max.replace(tzinfo=UTC), timedelta(days=1)).year == 9999
