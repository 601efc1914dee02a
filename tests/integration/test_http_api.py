"""The HTTP API against the real broker and a real command processor (issue 9's Must show).

Agent-watch governance is enforced by the command processor; these tests prove the API carries
it faithfully: the cap (also under a race), roles, tenant isolation, collapse, bounds, the
protocol header, the in-app ledger, receipts, grants and schedules.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.clients import producer_config
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic
from pipeline.records.notification import NotificationKind, encode_notification
from pipeline.records.receipt import encode_receipt
from pipeline.rules.commands.immediate import daemon_grant
from pipeline.rules.keys import subject_key, watcher_key
from pipeline.rules.outcomes import Outcome, Reason
from pipeline.rules.receipts import Receipt
from pipeline.runtime.keys import read_keys
from tests.integration.api_harness import TENANT, USER, Plane, agent_watch, running_plane

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plane(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with running_plane(kafka_bootstrap, tmp_path_factory.mktemp("api")) as found:
        yield found


def error_of(response: Any) -> tuple[int, str]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "field"}
    return response.status_code, body["error"]["code"]


def propose(plane: Plane, body: dict[str, Any], who: str = "agent") -> Any:
    return plane.call("POST", "/v1/watches:propose", who, json=body)


# --- the cap ----------------------------------------------------------------------------------


def test_approving_a_fourth_watch_in_a_session_is_refused_with_cap_reached(plane: Plane) -> None:
    session = "s-cap"
    for n in range(4):
        made = propose(plane, agent_watch(f"cap-{n}", run=f"r-{n}", session=session), "owner")
        assert made.status_code == 201, made.text
        assert made.json()["status"] == "proposed"
    for n in range(3):
        approved = plane.call("POST", f"/v1/watches/cap-{n}:approve")
        assert (approved.status_code, approved.json()["status"]) == (200, "active")
    fourth = plane.call("POST", "/v1/watches/cap-3:approve")
    assert error_of(fourth) == (409, "cap_reached")
    assert "already has 3 active watches" in fourth.json()["error"]["message"]
    assert fourth.json()["error"]["field"] == "session_id"
    still = plane.call("GET", "/v1/watches/cap-3")
    assert still.json()["status"] == "proposed"


def test_an_eleventh_pending_proposal_of_one_conversation_is_refused_and_another_proceeds(
    plane: Plane,
) -> None:
    """[limits] session_proposals (10): pending proposals count per conversation (session),
    whichever run or token made them; another conversation is not held by it."""
    session = "conversation:pending-cap"
    for n in range(10):
        made = propose(plane, agent_watch(f"pend-{n}", run=f"r-{n}", session=session), "owner")
        assert made.status_code == 201, made.text
    eleventh = propose(plane, agent_watch("pend-10", run="r-10", session=session), "owner")
    assert error_of(eleventh) == (409, "cap_reached")
    assert "already has 10 pending proposals" in eleventh.json()["error"]["message"]
    other = propose(plane, agent_watch("pend-other", run="r-10", session="conversation:o"), "owner")
    assert other.status_code == 201, other.text
    for watcher in [f"pend-{n}" for n in range(10)] + ["pend-other"]:
        assert plane.call("POST", f"/v1/watches/{watcher}:cancel").status_code == 200


def test_ten_racing_proposals_approved_in_parallel_activate_exactly_three(plane: Plane) -> None:
    bodies = [agent_watch(f"race-{n}", run=f"r-{n}") for n in range(10)]
    with ThreadPoolExecutor(max_workers=10) as pool:
        proposed = list(pool.map(lambda b: propose(plane, b, "racer"), bodies))
    assert [p.status_code for p in proposed] == [201] * 10, [p.text for p in proposed]
    ids = [p.json()["watcher_id"] for p in proposed]
    with ThreadPoolExecutor(max_workers=10) as pool:
        approved = list(pool.map(lambda w: plane.call("POST", f"/v1/watches/{w}:approve"), ids))
    codes = sorted(a.status_code for a in approved)
    assert codes == [200] * 3 + [409] * 7
    assert {error_of(a)[1] for a in approved if a.status_code == 409} == {"cap_reached"}
    active = plane.call("GET", "/v1/watches", params={"state": "active", "session_id": "s-race"})
    assert len(active.json()["watchers"]) == 3


# --- roles and tenants ------------------------------------------------------------------------


def test_an_agent_token_calling_approve_is_denied_403(plane: Plane) -> None:
    assert propose(plane, agent_watch("role-1", run="r-5")).status_code == 201
    denied = plane.call("POST", "/v1/watches/role-1:approve", "agent")
    assert error_of(denied) == (403, "denied")
    for verb in ("cancel", "pause"):
        assert error_of(plane.call("POST", f"/v1/watches/role-1:{verb}", "agent"))[0] == 403
    assert error_of(plane.call("GET", "/v1/watches", "agent"))[0] == 403
    assert error_of(plane.call("POST", "/v1/watches", "agent", json=agent_watch("x")))[0] == 403
    assert plane.call("GET", "/v1/watches/role-1").json()["status"] == "proposed"


def test_a_scoped_chat_token_calling_cancel_is_denied_403(plane: Plane) -> None:
    assert propose(plane, agent_watch("chat-1", run="r-6")).status_code == 201
    denied = plane.call("POST", "/v1/watches/chat-1:cancel", "chat")
    assert error_of(denied) == (403, "denied")
    assert error_of(propose(plane, agent_watch("chat-2", run="r-7"), "chat")) == (403, "denied")
    assert plane.call("GET", "/v1/watches/chat-1").json()["status"] == "proposed"


def test_another_tenants_token_reading_a_watch_gets_the_404_of_a_missing_one(
    plane: Plane,
) -> None:
    assert propose(plane, agent_watch("tenant-1", run="r-8")).status_code == 201
    assert plane.call("GET", "/v1/watches/tenant-1").status_code == 200
    theirs = plane.call("GET", "/v1/watches/tenant-1", "stranger")
    reaching = plane.call(
        "GET", "/v1/watches/tenant-1", "stranger", params={"tenant_id": TENANT, "user_id": USER}
    )
    absent = plane.call("GET", "/v1/watches/never-made", "owner")
    assert error_of(theirs) == error_of(reaching) == error_of(absent) == (404, "not_found")
    assert theirs.json() == reaching.json()
    assert json.dumps(theirs.json()).replace("tenant-1", "X") == json.dumps(absent.json()).replace(
        "never-made", "X"
    )
    assert error_of(plane.call("POST", "/v1/watches/tenant-1:cancel", "stranger"))[0] == 404


def test_a_manager_approves_a_user_watch_of_its_tenant(plane: Plane) -> None:
    made = propose(plane, agent_watch("mgr-1", run="r-9", session="s-mgr"), "owner")
    assert made.status_code == 201
    approved = plane.call("POST", "/v1/watches/mgr-1:approve", "manager", params={"user_id": USER})
    assert (approved.status_code, approved.json()["status"]) == (200, "active")
    stale = plane.call(
        "POST",
        "/v1/watches/mgr-1:pause",
        "manager",
        params={"user_id": USER, "expected_revision": 1},
    )
    assert error_of(stale) == (409, "stale_revision")


# --- collapse and bounds ----------------------------------------------------------------------


def test_two_identical_proposals_yield_one_watch_id(plane: Plane) -> None:
    first = propose(plane, agent_watch("same-1", run="r-10"))
    second = propose(plane, agent_watch("same-2", run="r-10"))
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["watcher_id"] == second.json()["watcher_id"] == "same-1"
    assert (first.json()["collapsed"], second.json()["collapsed"]) == (False, True)
    missing = plane.call("GET", "/v1/watches/same-2")
    assert error_of(missing) == (404, "not_found")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"window": "3h"}, "window"),
        ({"source": {**agent_watch("b")["source"], "cadence": "7m"}}, "source"),
    ],
)
def test_a_proposal_outside_the_bounds_is_refused_invalid(
    plane: Plane, change: dict[str, Any], field: str
) -> None:
    refused = propose(plane, agent_watch("bound-1", run="r-11", **change))
    assert error_of(refused) == (422, "invalid")
    assert str(refused.json()["error"]["field"]).startswith(field)


def test_a_proposal_without_a_notification_action_is_refused_invalid(plane: Plane) -> None:
    body = agent_watch("bound-2", run="r-11")
    del body["delivery"]
    refused = propose(plane, body)
    assert error_of(refused) == (422, "invalid")
    assert refused.json()["error"]["field"] == "delivery"


# --- protocol and authentication --------------------------------------------------------------


def test_a_missing_or_other_protocol_version_is_refused_400(plane: Plane) -> None:
    for protocol in (None, "2"):
        answer = plane.call("GET", "/v1/watches", protocol=protocol)
        assert error_of(answer) == (400, "protocol_version")
        assert answer.json()["error"]["field"] == "Vigil-Protocol-Version"


def test_a_missing_or_unknown_token_is_refused_401(plane: Plane) -> None:
    missing = plane.call("GET", "/v1/watches", None)
    assert error_of(missing) == (401, "unauthenticated")
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    unknown = plane.call("GET", "/v1/watches", None, headers={"Authorization": "Bearer nope"})
    assert error_of(unknown) == (401, "unauthenticated")


def test_probes_answer_without_credentials_and_the_served_contract_is_the_checked_in_one(
    plane: Plane,
) -> None:
    assert plane.http.get("/healthz").json() == {"status": "ok"}
    assert plane.http.get("/readyz").json() == {"status": "ready"}
    served = plane.http.get("/openapi.json").json()
    assert served == json.loads((ROOT / "docs" / "openapi.json").read_text(encoding="utf-8"))


# --- lifecycle, receipts, ledger ---------------------------------------------------------------


def test_pause_resume_cancel_and_list_follow_the_lifecycle(plane: Plane) -> None:
    made = propose(plane, agent_watch("life-1", run="r-1", session="s-life"), "owner")
    assert made.status_code == 201
    for verb, status in (("approve", "active"), ("pause", "paused"), ("resume", "active")):
        moved = plane.call("POST", f"/v1/watches/life-1:{verb}")
        assert (moved.status_code, moved.json()["status"]) == (200, status)
    live = plane.call("GET", "/v1/watches", params={"session_id": "s-life"}).json()["watchers"]
    assert [w["watcher_id"] for w in live] == ["life-1"]
    cancelled = plane.call("POST", "/v1/watches/life-1:cancel")
    assert cancelled.json()["closed_reason"] == "cancelled"
    assert error_of(plane.call("POST", "/v1/watches/life-1:resume")) == (409, "conflict")
    after = plane.call("GET", "/v1/watches", params={"session_id": "s-life"}).json()
    assert after == {"watchers": []}


def produce(plane: Plane, topic: Topic, key: str, partition_key: str, value: bytes) -> None:
    producer = Producer(producer_config(plane.bootstrap))
    partitions = plane.topology.partitions_for(topic)
    producer.produce(
        plane.topology.name(topic), value, key, partition_for(partition_key, partitions)
    )
    assert producer.flush(10) == 0


def test_evaluations_are_the_watchers_receipts_newest_first(plane: Plane) -> None:
    made = propose(plane, agent_watch("eval-1", run="r-2", session="s-eval"), "owner")
    assert made.status_code == 201
    key = watcher_key(TENANT, USER, "eval-1")
    ring = KeyRing(KeyEncryptionKeys.load(), default_codec())  # the keys the processor made
    read_keys(plane.bootstrap, plane.topology, ring, [(TENANT, USER)])
    base = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    for minutes, reason in ((0, Reason.CONDITION_FALSE), (5, Reason.STALE)):
        at = base + timedelta(minutes=minutes)
        receipt = Receipt(
            tenant_id=TENANT,
            user_id=USER,
            watcher_id="eval-1",
            watcher_version=1,
            evaluated_at=at,
            evidence_digest="d" * 64,
            trigger={"kind": "poll", "scheduled_at": at.isoformat()},
            trigger_key="k" * 64,
            observed_at=at,
            outcome=Outcome.PENDING if minutes == 0 else Outcome.UNAVAILABLE,
            reason=reason,
            authorized=True,
        )
        value = encode_receipt(default_codec(), ring, receipt, "run:r-2")
        produce(plane, Topic.RECEIPTS, key, "run:r-2", value)
    found = plane.call("GET", "/v1/watches/eval-1/evaluations").json()["evaluations"]
    assert [e["reason"] for e in found] == ["stale", "condition_false"]
    assert found[0]["evaluated_at"] > found[1]["evaluated_at"]
    assert error_of(plane.call("GET", "/v1/watches/eval-1/evaluations", "agent"))[0] == 403
    assert error_of(plane.call("GET", "/v1/watches/eval-1/evaluations", "stranger"))[0] == 404


def notification(
    ring: KeyRing, delivery_key: str, kind: str = "notification", user: str = USER
) -> bytes:
    """A ledger record as delivery writes it: a notification's text sealed under ``ring``."""
    return encode_notification(
        default_codec(),
        ring,
        NotificationKind(kind),
        delivery_key=delivery_key,
        tenant_id=TENANT,
        user_id=user,
        watcher_id="note-1",
        session_id="s-a",
        created_at=datetime.now(UTC),
        content=None if kind == "wake" else {"outcome": "satisfied", "text": "run r-1 succeeded"},
    )


def test_the_ledger_dedupes_skips_wakes_and_acknowledges_once(plane: Plane) -> None:
    subject = subject_key(TENANT, USER)
    first, second = "a" * 64, "b" * 64
    propose(plane, agent_watch("note-key", run="r-2", session="s-note"), "owner")  # a data key
    ring = KeyRing(KeyEncryptionKeys.load(), default_codec())  # the keys the processor made
    read_keys(plane.bootstrap, plane.topology, ring, [(TENANT, USER)])
    for key, kind in ((first, "notification"), (first, "notification"), (first, "wake")):
        produce(plane, Topic.NOTIFICATIONS, subject, subject, notification(ring, key, kind))
    produce(plane, Topic.NOTIFICATIONS, subject, subject, notification(ring, second))
    listed = plane.call("GET", "/v1/notifications").json()["notifications"]
    assert sorted(n["delivery_key"] for n in listed) == [first, second]
    assert all(n["acked_at"] is None for n in listed)
    acked = plane.call("POST", f"/v1/notifications/{first}:ack")
    assert (acked.status_code, acked.json()["already"]) == (200, False)
    again = plane.call("POST", f"/v1/notifications/{first}:ack")
    assert again.json() == {**acked.json(), "already": True}
    unacked = plane.call("GET", "/v1/notifications", params={"unacked": "true"}).json()
    assert [n["delivery_key"] for n in unacked["notifications"]] == [second]
    assert error_of(plane.call("POST", f"/v1/notifications/{'c' * 64}:ack")) == (404, "not_found")
    assert error_of(plane.call("GET", "/v1/notifications", "agent")) == (403, "denied")
    no_grant = plane.call("GET", "/v1/notifications", "stranger")
    assert error_of(no_grant) == (403, "denied"), "a subject no grant covers reads no ledger"
    assert error_of(plane.call("GET", "/v1/deliveries", "stranger")) == (403, "denied")


# --- grants and schedules ---------------------------------------------------------------------


def test_grants_are_operator_only_and_round_trip(plane: Plane) -> None:
    body = {
        "tenant_id": TENANT,
        "user_id": "u-2",
        "purpose": "ops.alert",
        "sources": ["ci.pipeline"],
        "actions": ["manage"],
        "until": "2030-01-01T00:00:00Z",
    }
    assert error_of(plane.call("POST", "/v1/grants", "owner", json=body)) == (403, "denied")
    made = plane.call("POST", "/v1/grants", "operator", json=body)
    assert made.status_code == 201, made.text
    grant_id = made.json()["grant_id"]
    listed = plane.call("GET", "/v1/grants", "operator", params={"user_id": "u-2"}).json()
    assert [g["grant_id"] for g in listed["grants"]] == [grant_id]
    revoked = plane.call("DELETE", f"/v1/grants/{grant_id}", "operator")
    assert revoked.json() == {"revoked": [grant_id], "narrowed": []}
    assert error_of(plane.call("DELETE", f"/v1/grants/{grant_id}", "operator"))[0] == 404
    naive = {**body, "until": "2030-01-01T00:00:00"}
    assert error_of(plane.call("POST", "/v1/grants", "operator", json=naive)) == (422, "invalid")


def test_schedules_are_listed_and_cancelled_through_the_dispatch_core(plane: Plane) -> None:
    _, spec = daemon_grant(TENANT, USER, ["me"])
    plane.grant(**{**spec.model_dump(mode="json"), "until": "2030-01-01T00:00:00Z"})
    at = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    schedule = {
        "watcher_id": "schedule:me:standup",
        "purpose": spec.purpose,
        "source": {"kind": "schedule", "at": at.isoformat().replace("+00:00", "Z")},
        "delivery": {"target": "me", "verb": "send", "text": "standup"},
    }
    assert plane.call("POST", "/v1/watches", json=schedule).status_code == 201
    listed = plane.call("GET", "/v1/schedules").json()
    assert [(s["name"], s["argv"]) for s in listed["schedules"]] == [
        ("standup", ["send", "standup"])
    ]
    cancelled = plane.call("POST", "/v1/schedules/standup:cancel")
    assert cancelled.json() == {"chat": "me", "name": "standup", "cancelled": True}
    assert error_of(plane.call("POST", "/v1/schedules/standup:cancel")) == (404, "not_found")
    assert error_of(plane.call("GET", "/v1/schedules", "chat")) == (403, "denied")
