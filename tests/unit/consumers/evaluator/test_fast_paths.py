"""The evaluator's hot-path shortcuts give what the model paths give, and stay correct."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from consumers.evaluator.plan import Plan
from pipeline.kafka.serde import default_codec
from pipeline.records.codec import json_text
from pipeline.records.grant import encode_grant
from pipeline.records.outbox_entry import (
    decode_outbox_entry,
    encode_outbox_entry,
    outbox_identity,
)
from pipeline.records.receipt import decode_receipt, encode_receipt, receipt_identity
from pipeline.records.watcher import Watch
from pipeline.records.watcher_state import encode_state
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.authz import Action, Grant
from pipeline.rules.budgets import BudgetCaps, BudgetVerdict
from pipeline.rules.commands import GrantRecord
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.evaluation import evaluate, recorded_budget
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.receipts import Receipt
from pipeline.rules.watcher_state import WatcherState
from pipeline.runtime.tables import Table, TableKind, TableSpec
from pipeline.runtime.views import GrantIndex
from tests.keyring import OpenRing

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CODEC = default_codec()


def definition() -> WatcherDefinition:
    body: dict[str, Any] = {
        "watcher_id": "build-failed",
        "purpose": "ops.alert",
        "source": {"kind": "event", "source_id": "ci", "event_type": "build", "max_age": "10m"},
        "condition": {"eq": ["status", "failed"]},
        "delivery": {
            "target": "ops-hook",
            "quiet_hours": {"start": "22:00", "end": "07:00", "timezone": "Europe/Berlin"},
        },
        "expires_at": "2027-06-01T00:00:00Z",
        "budgets": {"window": "1h", "evaluations": 10},
        "privacy": {"retain_paths": ["status", "commit.sha"]},
    }
    return WatcherDefinition.from_json(body, tenant_id="acme", user_id="ann").with_version(2)


def grant(grant_id: str = "g", until: datetime = NOW + timedelta(days=1)) -> Grant:
    return Grant(
        grant_id=grant_id,
        tenant_id="acme",
        user_id="ann",
        purpose="ops.alert",
        sources=frozenset({"ci"}),
        actions=frozenset({Action.EVALUATE}),
        until=until,
    )


def event(event_id: str = "b-1", status: str = "failed") -> Evidence:
    return Evidence(
        source_kind=EvidenceKind.EVENT,
        source_id="ci",
        observed_at=NOW,
        event_type="build",
        event_id=event_id,
        payload={"status": status, "commit": {"sha": "abc", "author": "x"}},
        position="events:0:7",
    )


def satisfied() -> Any:
    state = WatcherState(version=2, status=WatcherStatus.ACTIVE)
    return evaluate(definition(), state, event(), [grant()], NOW, recorded_budget(BudgetVerdict.OK))


def test_the_evaluation_carries_a_typed_receipt_and_outbox_entry() -> None:
    result = satisfied()
    assert isinstance(result.receipt, Receipt) and isinstance(result.outbox, OutboxEntry)
    assert result.receipt.payload == {"status": "failed", "commit": {"sha": "abc"}}
    assert result.receipt.delivery_key == result.outbox.delivery_key
    assert result.outbox.trigger == result.receipt.trigger


def _unsealed(raw: bytes, ring: OpenRing, aad: bytes) -> dict[str, Any]:
    """The record's Avro value with its sealed fields opened (nonces differ per seal)."""
    _, value = CODEC.decode(raw)
    value["sealed"] = ring.open(aad, value["sealed"])
    return value


def test_records_encoded_with_the_trigger_text_are_those_encoded_without_it_and_read_back() -> None:
    result = satisfied()
    ring = OpenRing()
    receipt, entry = result.receipt, result.outbox
    assert entry is not None
    text = json_text(receipt.trigger, "trigger")
    aad = receipt_identity(
        "acme", "ann", receipt.watcher_id, 2, receipt.trigger_key, receipt.evaluated_at
    )
    fast = encode_receipt(CODEC, ring, receipt, "ci", text)
    assert _unsealed(fast, ring, aad) == _unsealed(
        encode_receipt(CODEC, ring, receipt, "ci"), ring, aad
    )
    assert decode_receipt(CODEC, ring, fast) == (receipt, "ci")
    aad = outbox_identity(entry.delivery_key)
    fast = encode_outbox_entry(CODEC, ring, entry, text)
    assert _unsealed(fast, ring, aad) == _unsealed(
        encode_outbox_entry(CODEC, ring, entry), ring, aad
    )
    assert decode_outbox_entry(CODEC, ring, fast) == entry
    state = result.next_state
    key = ("acme", "ann", "build-failed")
    assert encode_state(CODEC, key, "ci", state, NOW, text) == encode_state(
        CODEC, key, "ci", state, NOW
    )


def test_a_pending_evaluation_has_no_outbox_entry() -> None:
    state = WatcherState(version=2, status=WatcherStatus.ACTIVE)
    result = evaluate(
        definition(), state, event(status="ok"), [grant()], NOW, recorded_budget(BudgetVerdict.OK)
    )
    assert result.outbox is None
    assert result.receipt.delivery_key is None


def grant_index(*grants: Grant) -> tuple[GrantIndex, Table]:
    table = Table(TableSpec("grants", "grants", TableKind.GLOBAL), -1)
    for g in grants:
        table.apply(g.grant_id, encode_grant(CODEC, GrantRecord(g, NOW, "op")))
    return GrantIndex(table, CODEC), table


def test_grant_index_answers_the_same_tuple_until_a_grant_of_that_subject_changes() -> None:
    index, table = grant_index(grant("g1"))
    first = index.of("acme", "ann")
    assert index.of("acme", "ann") is first
    table.data["g2"] = encode_grant(CODEC, GrantRecord(grant("g2"), NOW, "op"))
    index.refresh()
    second = index.of("acme", "ann")
    assert second is not first and {g.grant_id for g in second} == {"g1", "g2"}


def watch() -> Watch:
    d = definition()
    return Watch(
        key='["acme","ann","build-failed"]',
        parts=("acme", "ann", "build-failed"),
        source_id="ci",
        event_type="build",
        version=2,
        revision=1,
        status=WatcherStatus.ACTIVE,
        activated_at=None,
        definition_json=None,
        _definition=d,
    )


def plan(now: datetime) -> Plan:
    # No network: RedisBudgets connects on its first charge, which these tests never make.
    budgets = RedisBudgets(redis.Redis(host="127.0.0.1", port=1))
    return Plan(budgets, BudgetCaps(window=timedelta(hours=1)), now)


def test_an_allow_is_reused_while_its_grants_are_current_and_unexpired() -> None:
    w, grants = watch(), (grant(),)
    first = plan(NOW)._authorization(w, w.definition, grants)
    again = plan(NOW + timedelta(hours=1))._authorization(w, w.definition, grants)
    assert first.allowed and again is first


def test_an_allow_is_decided_again_when_its_grant_has_ended() -> None:
    w, grants = watch(), (grant(until=NOW + timedelta(minutes=5)),)
    assert plan(NOW)._authorization(w, w.definition, grants).allowed
    later = plan(NOW + timedelta(minutes=5))._authorization(w, w.definition, grants)
    assert not later.allowed and "expired" in later.detail


def test_an_allow_is_decided_again_when_the_subjects_grants_change() -> None:
    w = watch()
    first = plan(NOW)._authorization(w, w.definition, (grant("g1"),))
    revoked = plan(NOW)._authorization(w, w.definition, ())
    assert first.allowed and not revoked.allowed
    regranted = plan(NOW)._authorization(w, w.definition, (grant("g2"),))
    assert regranted.allowed and regranted.grant_id == "g2"
