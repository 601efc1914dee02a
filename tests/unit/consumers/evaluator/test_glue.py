"""The evaluator's pure glue: record round trips, ticks, state merge, index, tombstones."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from consumers.evaluator.lifecycle import LifecycleTracker
from consumers.evaluator.plan import effective_state
from pipeline.kafka.serde import default_codec
from pipeline.records.event import SharedEvidence, evidence_from_event
from pipeline.records.outbox_entry import decode_outbox_entry, encode_outbox_entry
from pipeline.records.receipt import decode_receipt, encode_receipt, receipt_identity
from pipeline.records.tick import EXPIRY_STEP, evidence_from_tick
from pipeline.records.watcher import Watch
from pipeline.records.watcher_state import decode_state, encode_state
from pipeline.rules.authz import Action, Grant
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.evaluation import evaluate, recorded_budget
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.keys import canonical_json, subject_of, watcher_key
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.outcomes import ErrorCode, Reason
from pipeline.rules.watcher_state import WatcherState
from pipeline.runtime.tables import Table, TableKind, TableSpec
from pipeline.runtime.views import WatcherIndex
from tests.keyring import OpenRing

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CODEC = default_codec()
KEY = ("acme", "u-42", "release-build-failed")


def definition(**overrides: Any) -> WatcherDefinition:
    body: dict[str, Any] = {
        "watcher_id": "release-build-failed",
        "purpose": "ops.alert",
        "source": {
            "kind": "event",
            "source_id": "ci.pipeline",
            "event_type": "build.finished",
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "failed"]},
        "delivery": {
            "target": "ops-hook",
            "quiet_hours": {"start": "22:00", "end": "07:00", "timezone": "Europe/Berlin"},
        },
        "expires_at": "2027-06-01T00:00:00Z",
        "budgets": {"window": "1h", "evaluations": 10},
        "privacy": {"retain_paths": ["status"]},
        **overrides,
    }
    return WatcherDefinition.from_json(body, tenant_id="acme", user_id="u-42").with_version(3)


def satisfied() -> tuple[WatcherDefinition, Any]:
    d = definition()
    grant = Grant(
        grant_id="g",
        tenant_id="acme",
        user_id="u-42",
        purpose="ops.alert",
        sources=frozenset({"ci.pipeline"}),
        actions=frozenset({Action.EVALUATE}),
        until=NOW + timedelta(days=1),
    )
    evidence = Evidence(
        source_kind=EvidenceKind.EVENT,
        source_id="ci.pipeline",
        observed_at=NOW,
        event_type="build.finished",
        event_id="b-1",
        payload={"status": "failed", "secret": "x"},
        position="events:0:7",
    )
    state = WatcherState(version=3, status=WatcherStatus.ACTIVE)
    return d, evaluate(d, state, evidence, [grant], NOW, recorded_budget(BudgetVerdict.OK))


def test_outbox_entry_receipt_and_state_round_trip_through_avro_unchanged() -> None:
    _, result = satisfied()
    assert result.outbox is not None and result.reason is Reason.CONDITION_TRUE
    ring = OpenRing()
    entry = decode_outbox_entry(CODEC, ring, encode_outbox_entry(CODEC, ring, result.outbox))
    assert entry == result.outbox
    receipt, source = decode_receipt(
        CODEC, ring, encode_receipt(CODEC, ring, result.receipt, "ci.pipeline")
    )
    assert (receipt, source) == (result.receipt, "ci.pipeline")
    assert receipt.payload == {"status": "failed"}
    state = result.next_state
    assert decode_state(CODEC, encode_state(CODEC, KEY, "ci.pipeline", state, NOW)) == state


def test_trigger_text_is_rfc8785_canonical_and_sealed() -> None:
    _, result = satisfied()
    ring = OpenRing()
    raw = encode_receipt(CODEC, ring, result.receipt, "ci.pipeline")
    _, value = CODEC.decode(raw)
    assert value["trigger"] is None and value["payload"] is None
    trigger = canonical_json(result.receipt.trigger)
    assert trigger not in raw and b"status" not in raw and b"b-1" not in raw
    aad = receipt_identity(
        "acme", "u-42", result.receipt.watcher_id, 3, result.receipt.trigger_key, NOW
    )
    opened = json.loads(ring.open(aad, value["sealed"]) or b"null")
    assert canonical_json(opened["trigger"]) == trigger


def test_a_receipt_without_its_sealed_field_reads_as_erased_never_as_plaintext() -> None:
    """Issue 27: plaintext in place of the sealed field is a downgrade erasure could not reach."""
    _, result = satisfied()
    ring = OpenRing()
    raw = encode_receipt(CODEC, ring, result.receipt, "ci.pipeline")
    name, value = CODEC.decode(raw)
    forged = {**value, "sealed": None, "trigger": '{"forged": 1}', "payload": '{"status": "x"}'}
    receipt, _ = decode_receipt(CODEC, ring, CODEC.encode(name, forged))
    assert (receipt.erased, receipt.trigger, receipt.payload) == (True, {}, None)


def test_expiry_tick_stands_after_the_deadline_and_poll_tick_names_its_watcher() -> None:
    tick: dict[str, Any] = {
        "kind": "expiry",
        "tenant_id": "acme",
        "user_id": "u-42",
        "watcher_id": "w",
        "watcher_version": 1,
        "source_id": "s",
        "scheduled_at": NOW,
        "observed_at": NOW,
        "payload": None,
        "tool_error": None,
        "usage_tokens": 5,
        "usage_micro_usd": 7,
        "late": False,
    }
    ring = OpenRing()
    expiry = evidence_from_tick(tick, "ticks:0:1", ring)
    assert expiry.source_kind is EvidenceKind.SCHEDULE
    assert expiry.scheduled_at == NOW + EXPIRY_STEP
    poll = evidence_from_tick({**tick, "kind": "poll", "tool_error": "timeout"}, "ticks:0:2", ring)
    assert poll.source_kind is EvidenceKind.POLL and poll.scheduled_at == NOW
    assert poll.watcher_key == ("acme", "u-42", "w") and poll.tool_error is ErrorCode.TIMEOUT
    assert (poll.tokens, poll.micro_usd) == (5, 7)


def watch(status: WatcherStatus = WatcherStatus.ACTIVE, version: int = 3) -> Watch:
    d = definition()
    return Watch(
        key=watcher_key(*KEY),
        parts=KEY,
        source_id="ci.pipeline",
        event_type="build.finished",
        version=version,
        revision=1,
        status=status,
        activated_at=None,
        definition_json=canonical_json(d.to_json()).decode(),
    )


def test_effective_state_starts_fresh_per_version_and_takes_registry_status() -> None:
    stored = WatcherState(version=3, status=WatcherStatus.ACTIVE, evaluations=4)
    assert effective_state(watch(WatcherStatus.PAUSED), stored).status is WatcherStatus.PAUSED
    assert effective_state(watch(WatcherStatus.PAUSED), stored).evaluations == 4
    assert effective_state(watch(version=4), stored).evaluations == 0
    closed = stored.replace(status=WatcherStatus.SATISFIED)
    assert effective_state(watch(), closed) is closed, "the evaluator's close is not undone"
    assert effective_state(watch(), stored) is stored


def table(kind: TableKind, name: str, data: dict[str, bytes] | None = None) -> Table:
    found = Table(TableSpec(name, f"t.{name}", kind), 0)
    for key, value in (data or {}).items():
        found.apply(key, value)
    return found


def watcher_value(
    source_id: str, event_type: str, watcher_id: str, status: str = "active"
) -> bytes:
    return CODEC.encode(
        "watcher",
        {
            "tenant_id": "acme",
            "user_id": "u-42",
            "watcher_id": watcher_id,
            "version": 1,
            "revision": 1,
            "status": status,
            "source_kind": "event",
            "source_id": source_id,
            "event_type": event_type,
            "updated_at": NOW,
            "definition": "{}",
        },
    )


def test_index_follows_table_changes_by_source_and_event_type() -> None:
    watchers = table(TableKind.EXTERNAL, "watchers", {"k1": watcher_value("s", "t", "w1")})
    index = WatcherIndex(watchers, CODEC, OpenRing())
    assert [w.key for w in index.for_event("s", "t")] == ["k1"]
    watchers.apply("k2", watcher_value("s", "t", "w2"))
    watchers.apply("k1", watcher_value("s", "other", "w1"))
    assert index.refresh() == 2
    assert [w.key for w in index.for_event("s", "t")] == ["k2"]
    assert [w.key for w in index.for_event("s", "other")] == ["k1"]
    watchers.apply("k2", None)
    index.refresh()
    assert index.for_event("s", "t") == () and index.get("k2") is None


def lifecycle_value(status: str, version: int, scope: str = "watcher") -> bytes:
    return CODEC.encode(
        "lifecycle",
        {
            "scope": scope,
            "tenant_id": "acme",
            "user_id": "u-42",
            "watcher_id": None if scope == "subject" else "w",
            "version": version,
            "revision": 2,
            "status": status,
            "reason": None,
            "at": NOW,
        },
    )


def state_value(version: int, at: datetime = NOW - timedelta(minutes=1)) -> bytes:
    state = WatcherState(version=version, status=WatcherStatus.ACTIVE)
    return encode_state(CODEC, ("acme", "u-42", "w"), "s", state, at)


def test_cancel_tombstones_state_again_after_an_abort_but_never_a_newer_version() -> None:
    key = watcher_key("acme", "u-42", "w")
    lifecycle = table(TableKind.GLOBAL, "lifecycle")
    state = table(TableKind.OWNED, "state", {key: state_value(1)})
    tracker = LifecycleTracker(lifecycle, CODEC)
    assert tracker.apply(0, state) == 0
    lifecycle.apply(key, lifecycle_value("cancelled", 1))
    tracker.refresh()
    assert tracker.apply(0, state) == 1 and key not in state
    state.rollback()  # the transaction aborted: the tombstone is undone
    assert tracker.apply(0, state) == 1 and key not in state
    state.committed()
    assert tracker.apply(0, state) == 0
    state.set(key, state_value(2))  # re-created as version 2: the old cancel does not apply
    state.committed()
    lifecycle.apply(key, lifecycle_value("cancelled", 1))
    tracker.refresh()
    assert tracker.apply(0, state) == 0 and key in state


def test_subject_erasure_tombstones_every_state_of_that_subject_only() -> None:
    mine, other = watcher_key("acme", "u-42", "w"), watcher_key("acme", "u-7", "w")
    lifecycle = table(TableKind.GLOBAL, "lifecycle")
    state = table(TableKind.OWNED, "state", {mine: state_value(1), other: state_value(1)})
    tracker = LifecycleTracker(lifecycle, CODEC)
    tracker.apply(0, state)
    assert subject_of(mine) == '["acme","u-42"]'
    lifecycle.apply(subject_of(mine), lifecycle_value("erased", 0, scope="subject"))
    tracker.refresh()
    assert tracker.apply(0, state) == 1
    assert mine not in state and other in state


_EVENT_VALUE: dict[str, Any] = {  # a decoded event value, as the evaluator reads one
    "source_id": "ci.pipeline",
    "event_type": "build.finished",
    "event_id": "b-1",
    "envelope_id": "env",
    "cursor": "9",
    "observed_at": NOW,
    "payload": '{"status":"failed"}',
}


def test_shared_evidence_digest_equals_plain_digest_and_is_computed_once() -> None:
    shared = evidence_from_event(_EVENT_VALUE, "events:0:1")
    plain = Evidence(**{name: getattr(shared, name) for name in Evidence.__dataclass_fields__})
    assert shared.digest() == plain.digest()
    assert shared.digest() is shared.digest()


@pytest.mark.parametrize(
    "extra",
    [{}, {"envelope_id": None, "cursor": None, "payload": None}, {"observed_at": NOW.astimezone()}],
)
def test_decoded_event_evidence_is_what_the_checked_constructor_builds(
    extra: dict[str, Any],
) -> None:
    """evidence_from_event fills SharedEvidence's slots directly: every field the class has,
    with the values (and the UTC instant) its checked constructor would hold."""
    shared = evidence_from_event({**_EVENT_VALUE, **extra}, "events:0:1")
    names = list(Evidence.__dataclass_fields__)
    built = SharedEvidence(**{name: getattr(shared, name) for name in names})
    assert [getattr(shared, name) for name in names] == [getattr(built, name) for name in names]
    assert type(shared) is SharedEvidence and shared._digest is None
    assert shared.observed_at.tzinfo is UTC and shared.digest() == built.digest()
