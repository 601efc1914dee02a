"""The trust boundary through the HTTP API (issue 14's Must show), against the real broker and a
real command processor: an agent token tries every escalation DESIGN.md §10 forbids and is
refused, and nothing changes; every proposal is a bounded agent watch; limits hold; updates
name their revision; a revoked grant refuses management; authentication comes before any body
is read, bodies are bounded, reads of the ledger are bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

import httpx
import pytest

from pipeline.kafka.clients import Producer
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.scan import scan
from pipeline.kafka.topics import Topic
from pipeline.rules.commands.immediate import daemon_grant
from tests.integration.api_harness import TENANT, USER, Plane, agent_watch, running_plane
from tests.integration.api_harness import event_watch as watch

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def plane(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with running_plane(kafka_bootstrap, tmp_path_factory.mktemp("api-trust")) as found:
        _, spec = daemon_grant(TENANT, USER, ["me"])
        found.grant(**{**spec.model_dump(mode="json"), "until": "2099-01-01T00:00:00Z"})
        found.grant(
            tenant_id=TENANT,
            user_id=USER,
            purpose="ops.alert",
            sources=["ci.pipeline"],
            targets=["ops-hook"],
            actions=["evaluate", "manage"],
        )
        yield found


def error_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def in_a_day() -> str:
    at = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    return at.isoformat().replace("+00:00", "Z")


def schedule(name: str, **delivery: Any) -> dict[str, Any]:
    return {
        "watcher_id": f"schedule:me:{name}",
        "purpose": "control.chat",
        "source": {"kind": "schedule", "at": in_a_day()},
        "delivery": {"target": "me", "verb": "send", "text": name, **delivery},
    }


# --- an agent token: every escalation refused, nothing changed -------------------------------


def test_an_agent_token_cannot_create_a_schedule_or_an_active_watcher_over_http(
    plane: Plane,
) -> None:
    sneaky = schedule("sneaky")
    sneaky["delivery"] = {"target": "me", "verb": "run", "args": ["/bin/sh", "-c", "id"]}
    for body in (sneaky, schedule("plain"), watch("active-by-agent")):
        created = plane.call("POST", "/v1/watches", "agent", json=body)
        assert error_of(created) == (403, "denied"), created.text
        assert error_of(plane.call("GET", f"/v1/watches/{body['watcher_id']}")) == (
            404,
            "not_found",
        )


class _Body(TypedDict, total=False):
    """What one attempt sends besides its method and path (nothing, or a JSON body)."""

    json: dict[str, Any]


def test_an_agent_token_never_updates_pauses_cancels_approves_or_grants(plane: Plane) -> None:
    made = plane.call("POST", "/v1/watches", "owner", json=watch("owned"))
    assert made.status_code == 201, made.text
    proposal = plane.call("POST", "/v1/watches:propose", "agent", json=agent_watch("agents-own"))
    assert proposal.status_code == 201, proposal.text
    attempts: list[tuple[str, str, _Body]] = [
        ("PUT", "/v1/watches/owned", {"json": {**watch("owned"), "expected_revision": 1}}),
        ("POST", "/v1/watches/owned:pause", {}),
        ("POST", "/v1/watches/owned:cancel", {}),
        ("POST", "/v1/watches/agents-own:approve", {}),
        ("POST", "/v1/watches/agents-own:cancel", {}),
        ("GET", "/v1/watches", {}),
        ("GET", "/v1/grants", {}),
        ("POST", "/v1/grants", {"json": {"tenant_id": TENANT, "user_id": USER,
                                         "purpose": "x", "sources": ["s"], "actions": ["manage"],
                                         "until": in_a_day()}}),
    ]  # fmt: skip
    for method, path, kwargs in attempts:
        answer = plane.call(method, path, "agent", **kwargs)
        assert answer.status_code in (403, 404), (method, path, answer.text)
    owned = plane.call("GET", "/v1/watches/owned").json()
    assert (owned["status"], owned["revision"]) == ("active", 1)
    assert plane.call("GET", "/v1/watches/agents-own").json()["status"] == "proposed"


def test_an_agent_lists_and_cancels_only_the_schedules_its_session_created(plane: Plane) -> None:
    made = plane.call("POST", "/v1/watches", "owner", json=schedule("users-own"))
    assert made.status_code == 201, made.text
    listed = plane.call("GET", "/v1/schedules", "agent")
    assert listed.status_code == 200 and listed.json()["schedules"] == []
    theirs = plane.call("POST", "/v1/schedules/users-own:cancel", "agent")
    assert error_of(theirs) == (404, "not_found")
    assert plane.call("GET", "/v1/watches/schedule:me:users-own").json()["status"] == "active"


# --- every proposal is a bounded agent watch -------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"mode": "every", "terminal_condition": None},
        {"window": None, "expires_at": "2036-01-01T00:00:00Z"},
        {"window": None},
        {"source": {**agent_watch("x")["source"], "cadence": None, "cron": "* * * * *",
                    "timezone": "UTC", "missed": "latest"}},
        {"source": {**agent_watch("x")["source"], "tool": "http.json@v1"}},
    ],
)  # fmt: skip
def test_a_proposal_outside_seed_003s_bounds_is_refused_422(
    plane: Plane, change: dict[str, Any]
) -> None:
    body = {**agent_watch("unbounded", run="r-9"), **change}
    body = {k: v for k, v in body.items() if v is not None}
    if isinstance(body.get("source"), dict):
        body["source"] = {k: v for k, v in body["source"].items() if v is not None}
    for who in ("agent", "owner"):
        if who == "owner":
            body["session_id"] = "s-a"
        refused = plane.call("POST", "/v1/watches:propose", who, json=body)
        assert error_of(refused) == (422, "invalid"), refused.text
    assert error_of(plane.call("GET", "/v1/watches/unbounded")) == (404, "not_found")


def test_a_proposal_without_an_id_or_mode_gets_a_generated_id_and_mode_once(plane: Plane) -> None:
    body = agent_watch("ignored", run="r-10")
    del body["watcher_id"], body["mode"]
    made = plane.call("POST", "/v1/watches:propose", "agent", json=body)
    assert made.status_code == 201, made.text
    view = made.json()
    assert view["watcher_id"].startswith("p-") and view["definition"]["mode"] == "once"
    assert view["session_id"] == "s-a"


# --- updates name their revision --------------------------------------------------------------


def test_an_update_with_a_stale_or_missing_revision_is_409_and_changes_nothing(
    plane: Plane,
) -> None:
    assert plane.call("POST", "/v1/watches", "owner", json=watch("cas")).status_code == 201
    got = plane.call("GET", "/v1/watches/cas")
    assert got.headers["ETag"] == '"1"'
    changed = {**watch("cas"), "condition": {"eq": ["status", "broken"]}}
    missing = plane.call("PUT", "/v1/watches/cas", json=changed)
    stale = plane.call("PUT", "/v1/watches/cas", json=changed, headers={"If-Match": '"4"'})
    stale_body = plane.call("PUT", "/v1/watches/cas", json={**changed, "expected_revision": 0})
    for answer in (missing, stale, stale_body):
        assert error_of(answer) == (409, "stale_revision"), answer.text
    unchanged = plane.call("GET", "/v1/watches/cas").json()
    assert (unchanged["version"], unchanged["revision"]) == (1, 1)
    assert unchanged["definition"]["condition"] == {"eq": ["status", "failed"]}
    current = {"If-Match": got.headers["ETag"]}
    updated = plane.call("PUT", "/v1/watches/cas", json=changed, headers=current)
    assert updated.status_code == 200, updated.text
    assert (updated.json()["version"], updated.headers["ETag"]) == (2, '"2"')


# --- a revoked grant locks management ---------------------------------------------------------


def test_a_revoked_grant_refuses_pause_and_cancel_and_changes_nothing(plane: Plane) -> None:
    grant_id = plane.grant(
        tenant_id=TENANT,
        user_id=USER,
        purpose="ops.revocable",
        sources=["ci.pipeline"],
        targets=["ops-hook"],
        actions=["manage"],
    )
    body = {**watch("revocable"), "purpose": "ops.revocable"}
    assert plane.call("POST", "/v1/watches", "owner", json=body).status_code == 201
    revoked = plane.call("DELETE", f"/v1/grants/{grant_id}", "operator")
    assert revoked.status_code == 200, revoked.text
    for verb in ("pause", "cancel", "resume"):
        answer = plane.call("POST", f"/v1/watches/revocable:{verb}")
        assert error_of(answer) == (403, "denied"), answer.text
    assert error_of(plane.call("GET", "/v1/watches/revocable")) == (403, "denied")
    plane.grant(
        tenant_id=TENANT,
        user_id=USER,
        purpose="ops.revocable",
        sources=["ci.pipeline"],
        targets=["ops-hook"],
        actions=["manage"],
    )
    kept = plane.call("GET", "/v1/watches/revocable").json()
    assert (kept["status"], kept["revision"]) == ("active", 1)


# --- the front door: authentication before any body, bounded bodies and reads ------------------


def test_an_unauthenticated_request_is_refused_before_its_body_is_read(plane: Plane) -> None:
    garbage = b"{" * 200_000  # not JSON, deeply nested if it were parsed
    for who, code in ((None, 401), ("stranger-token", 401)):
        headers = {"Vigil-Protocol-Version": "1", "Content-Type": "application/json"}
        if who is not None:
            headers["Authorization"] = f"Bearer {who}"
        answer = plane.http.post("/v1/watches:propose", content=garbage, headers=headers)
        assert error_of(answer) == (code, "unauthenticated"), answer.text
    no_version = plane.call("POST", "/v1/watches", "owner", protocol=None, content=garbage)
    assert error_of(no_version) == (400, "protocol_version")


def test_a_body_over_1_mib_is_413_whoever_sends_it(plane: Plane) -> None:
    big = {**watch("big"), "condition": {"eq": ["status", "x" * (1 << 20)]}}
    answer = plane.call("POST", "/v1/watches", "owner", json=big)
    assert error_of(answer) == (413, "too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the stream itself is bounded
        for _ in range(1100):
            yield b" " * 1024

    streamed = plane.call("POST", "/v1/watches", "owner", content=chunks())
    assert error_of(streamed) == (413, "too_large")
    assert error_of(plane.call("GET", "/v1/watches/big")) == (404, "not_found")


def test_ledger_reads_scan_only_the_newest_records_of_a_partition(plane: Plane) -> None:
    topic = plane.topology.name(Topic.NOTIFICATIONS)
    partition = partition_for("bounded", plane.topology.partitions_for(Topic.NOTIFICATIONS))
    producer = Producer(plane.bootstrap)
    for n in range(30):
        producer.produce(topic, "bounded", f"v{n}".encode(), partition)
    producer.flush(30)
    producer.close()
    everything = [m.value() for m in scan(plane.bootstrap, topic, partitions=(partition,))]
    tail = [m.value() for m in scan(plane.bootstrap, topic, partitions=(partition,), tail=10)]
    assert len(everything) >= 30 and tail == everything[-10:]
