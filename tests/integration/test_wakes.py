"""``GET /v1/ledger/wakes`` on the whole pipeline (seed 003 ``wake_session``): an approved agent
watch fires, delivery writes the in-app notification and then its wake, and the caller's SSE
stream carries the wake — content-free — only once the notification is durable: the client that
rereads the ledger on the wake finds it. Another user's stream on the same ledger partition
never shows it; roles that may not read a ledger, and users with no grant that lets them manage
watchers, are refused before anything is read; streams are bounded in number and end when idle."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from pipeline.control.agent import agent_principal
from pipeline.control.http.api import create_app
from pipeline.control.http.auth import TokenDirectory
from pipeline.control.http.common import ApiServices
from pipeline.control.http.wake_reader import KafkaWakes, StreamSlots, WakeLimits
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic
from pipeline.records.notification import decode_notification
from pipeline.rules.authz import Action, Principal, Role
from pipeline.rules.commands import CommandVerb, GrantSpec
from tests.integration.api_harness import serve
from tests.integration.erasure_stack import Stack, same_partition_user
from tests.integration.runtime_helpers import read_all
from tests.receiver import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TENANT = f"w{uuid.uuid4().hex[:8]}"
OWNER, OTHER, SESSION, RUN = "u-wake", "", "s-wake", f"r-{uuid.uuid4().hex[:6]}"
HEADERS = {"Vigil-Protocol-Version": "1"}


def _token(name: str) -> str:
    return f"wake-token-{name}-{TENANT}"


@dataclass
class Api:
    stack: Stack
    url: str
    quick_url: str  # the same API with short idle streams and one stream per caller
    other_user: str

    def get(self, path: str, who: str, base: str | None = None, **kw: Any) -> httpx.Response:
        headers = {**HEADERS, "Authorization": f"Bearer {_token(who)}"}
        return httpx.get((base or self.url) + path, headers=headers, timeout=30, **kw)


@dataclass
class Follower:
    """An SSE client as docs/openapi.json describes: on each wake, reread the ledger."""

    api: Api
    who: str
    events: list[dict[str, Any]] = field(default_factory=list)
    ledger_on_wake: list[set[str]] = field(default_factory=list)
    opened: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        headers = {**HEADERS, "Authorization": f"Bearer {_token(self.who)}"}
        with httpx.stream("GET", self.api.url + "/v1/ledger/wakes", headers=headers,
                          timeout=30) as response:  # fmt: skip
            assert response.status_code == 200, response.read()
            self.opened.set()
            for line in response.iter_lines():  # a heartbeat a second: stop is seen soon
                if self.stop.is_set():
                    return
                if line.startswith("data: "):
                    self.events.append(json.loads(line.removeprefix("data: ")))
                    found = self.api.get("/v1/notifications", self.who).json()
                    self.ledger_on_wake.append({n["delivery_key"] for n in found["notifications"]})


@pytest.fixture(scope="module")
def api(kafka_bootstrap: str, redis_url: str) -> Iterator[Api]:
    with Receiver() as receiver:
        stack = Stack(kafka_bootstrap, redis_url, receiver, name="wakes")
        other = same_partition_user(TENANT, OWNER, "u-other")
        people = {
            "owner": Principal(name="owner", role=Role.USER, tenant_id=TENANT, user_id=OWNER),
            "other": Principal(name="other", role=Role.USER, tenant_id=TENANT, user_id=other),
            "agent": agent_principal(TENANT, OWNER, SESSION, name="agent"),
            "stranger": Principal(
                name="stranger", role=Role.USER, tenant_id=TENANT, user_id="u-stranger"
            ),
        }
        tokens = TokenDirectory(
            {hashlib.sha256(_token(n).encode()).digest(): p for n, p in people.items()}
        )

        def services(slots: StreamSlots) -> ApiServices:
            return ApiServices(
                tokens=tokens,
                commands=stack.client,
                ledger=stack.ledger,
                schedules=lambda _p: None,  # type: ignore[arg-type,return-value]
                wakes=KafkaWakes(kafka_bootstrap, stack.topology),
                wake_slots=slots,
            )

        quick = StreamSlots(WakeLimits(per_principal=1, idle_s=2.0, heartbeat_s=0.5))
        try:
            with (
                serve(create_app(services(StreamSlots(WakeLimits(heartbeat_s=1.0))))) as url,
                serve(create_app(services(quick))) as quick_url,
            ):
                for user in (OWNER, other):  # a stream needs a grant that manages watchers
                    _grant(stack, user)
                yield Api(stack, url, quick_url, other)
        finally:
            stack.close()


def _agent_watch() -> dict[str, Any]:
    return {
        "watcher_id": "wake-me",
        "purpose": "agent.watch",
        "mode": "once",
        "source": {
            "kind": "polling",
            "source_id": f"run:{RUN}",
            "tool": "workflow.run.status@v1",
            "target": RUN,
            "cadence": "1m",
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "succeeded"]},
        "delivery": {"target": "inbox", "wake_session": True},
        "window": "1h",
    }


def _ledger_offsets(api: Api) -> dict[str, dict[str, int]]:
    """Per delivery key of the owner, the ledger offset of each record kind (read committed)."""
    ring = api.stack.ring((TENANT, OWNER))
    found: dict[str, dict[str, int]] = {}
    for msg in read_all(api.stack.bootstrap, api.stack.topology.name(Topic.NOTIFICATIONS)):
        raw = msg.value()
        if raw is None:
            continue
        value = decode_notification(default_codec(), ring, raw)
        if (value["tenant_id"], value["user_id"]) == (TENANT, OWNER):
            found.setdefault(value["delivery_key"], {})[value["kind"]] = msg.offset() or 0
    return found


def _grant(stack: Stack, user: str) -> None:
    """A grant that lets ``user`` run the agent watch and manage it (so read its ledger)."""
    spec = GrantSpec(
        tenant_id=TENANT,
        user_id=user,
        purpose="agent.watch",
        sources=(f"run:{RUN}",),
        tools=("workflow.run.status@v1",),
        targets=("inbox",),
        actions=(Action.PROPOSE, Action.APPROVE, Action.EVALUATE, Action.DELIVER, Action.MANAGE),
        until=datetime(2030, 1, 1, tzinfo=UTC),
    )
    stack.ok(CommandVerb.GRANT_ADD, TENANT, user, grant=spec)


def test_a_wake_follows_its_durable_notification_and_only_its_subject_sees_it(api: Api) -> None:
    stack = api.stack
    mine, theirs = Follower(api, "owner"), Follower(api, "other")
    threads = [threading.Thread(target=f.run, daemon=True) for f in (mine, theirs)]
    for thread in threads:
        thread.start()
    assert mine.opened.wait(30) and theirs.opened.wait(30)
    payload = {"tenant_id": TENANT, "run_id": RUN, "status": "succeeded"}
    stack.publish(f"run:{RUN}", "workflow.run.status", "e-1", payload, tenant_id=TENANT)
    agent = agent_principal(TENANT, OWNER, SESSION)
    proposal = stack.client.command(CommandVerb.PROPOSE, agent, TENANT, OWNER,
                                    definition=_agent_watch())  # fmt: skip
    assert stack.client.send(proposal).ok
    stack.ok(CommandVerb.APPROVE, TENANT, OWNER, watcher_id="wake-me")
    deadline = time.monotonic() + 60
    while not mine.events and time.monotonic() < deadline:
        stack.clock.advance(timedelta(minutes=1))
        time.sleep(1.5)
    time.sleep(1.0)  # the other stream would have had it by now
    for follower in (mine, theirs):
        follower.stop.set()
    for thread in threads:
        thread.join(10)

    assert len(mine.events) == 1, (mine.events, _ledger_offsets(api))
    (wake,) = mine.events
    assert set(wake) == {"session_id", "position"} and wake["session_id"] == SESSION
    assert theirs.events == [], "another user's stream shows none of the owner's wakes"
    offsets = _ledger_offsets(api)
    ((key, kinds),) = offsets.items()
    assert mine.ledger_on_wake == [{key}], "rereading the ledger on the wake finds it"
    assert kinds["notification"] < kinds["wake"]
    assert wake["position"].endswith(f":{kinds['wake']}")


def test_roles_that_may_not_read_a_ledger_are_refused_before_any_read(api: Api) -> None:
    assert api.get("/v1/ledger/wakes", "agent").status_code == 403
    assert api.get("/v1/ledger/wakes", "stranger").status_code == 403, "a user with no grant"
    anonymous = httpx.get(api.url + "/v1/ledger/wakes", headers=HEADERS, timeout=30)
    assert anonymous.status_code == 401


def test_streams_are_bounded_per_caller_and_end_when_idle(api: Api) -> None:
    headers = {**HEADERS, "Authorization": f"Bearer {_token('owner')}"}
    started = time.monotonic()
    with httpx.stream("GET", api.quick_url + "/v1/ledger/wakes", headers=headers,
                      timeout=30) as first:  # fmt: skip
        assert first.status_code == 200
        second = api.get("/v1/ledger/wakes", "owner", base=api.quick_url)
        assert second.status_code == 409 and second.json()["error"]["code"] == "cap_reached"
        body = "".join(first.iter_text())  # ends by itself once idle
    assert "idle" in body and ": heartbeat" in body
    assert time.monotonic() - started < 25
    again = api.get("/v1/notifications", "owner", base=api.quick_url)
    assert again.status_code == 200
    with httpx.stream("GET", api.quick_url + "/v1/ledger/wakes", headers=headers,
                      timeout=30) as reopened:  # fmt: skip
        assert reopened.status_code == 200, "the idle stream's slot was released"
