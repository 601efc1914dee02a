"""Console pages authorize before they read the log: a publisher (or an agent) signed in to the
console loads every page without one read of receipts or deliveries being started; an owner's
pages do read; a principal over its rate gets 429 with Retry-After, and sign-in attempts are
throttled per client address."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pipeline.config import parse_config
from pipeline.control.http.api import create_app
from pipeline.control.http.auth import TokenDirectory
from pipeline.control.http.common import ApiServices
from pipeline.control.http.limits import RateLimiter
from pipeline.rules.authz import Action, Principal, Role
from pipeline.rules.commands import CommandVerb, GrantSpec
from tests.unit.control.http.test_auth import MemoryProcessor, NoLedger, refuse_schedules

pytestmark = pytest.mark.unit

PAGES = ("/ui/watches", "/ui/watches/w-1", "/ui/deliveries", "/ui/proposals", "/ui/schedules")
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class CountingLedger(NoLedger):
    """A ledger that counts every read a page starts."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def latest(
        self, tenant_id: str, user_id: str, source_ids: Iterable[str] | None = None
    ) -> dict[str, dict[str, Any]]:
        self.reads.append("latest")
        return {}

    def evaluations(self, *args: Any) -> tuple[list[dict[str, Any]], int]:
        self.reads.append("evaluations")
        return [], 0

    def lifecycle(self, tenant_id: str, user_id: str, watcher_id: str) -> list[dict[str, Any]]:
        self.reads.append("lifecycle")
        return []

    def deliveries(self, *args: Any) -> list[dict[str, Any]]:
        self.reads.append("deliveries")
        return []


def entry(token: str, role: str, **extra: Any) -> dict[str, Any]:
    digest = hashlib.sha256(token.encode()).hexdigest()
    return {"token_sha256": digest, "role": role, "tenant_id": "acme", "user_id": "u-1"} | extra


def services(ledger: CountingLedger, **limits: Any) -> ApiServices:
    config = parse_config(
        {
            "principals": {
                "owner": entry("owner-secret", "user"),
                "bot": entry("bot-secret", "agent", session_id="s-1"),
                "ci": entry("ci-secret", "publisher", sources=["ci.pipeline"]),
            }
        }
    )
    processor = MemoryProcessor()
    operator = Principal(name="op", role=Role.OPERATOR, tenant_id="acme", user_id="ops")
    spec = GrantSpec(
        tenant_id="acme",
        user_id="u-1",
        purpose="ops.alert",
        sources=("ci.pipeline",),
        targets=("in-app",),
        actions=(Action.MANAGE,),
        until=datetime.now(UTC) + timedelta(days=1),
    )
    grant = processor.command(CommandVerb.GRANT_ADD, operator, "acme", "u-1", grant=spec)
    assert processor.send(grant).ok
    return ApiServices(
        tokens=TokenDirectory.from_config(config.principals),
        commands=processor,
        ledger=ledger,
        schedules=refuse_schedules,
        **limits,
    )


def signed_in(app: Any, token: str) -> TestClient:
    client = TestClient(app, base_url="https://testserver", follow_redirects=False)
    form = client.get("/ui/sign-in")
    found = _CSRF.search(form.text)
    assert found is not None
    done = client.post("/ui/sign-in", data={"token": token, "csrf": found.group(1)})
    assert done.status_code == 303, done.text
    assert "secure" in done.headers["set-cookie"].lower()
    return client


@pytest.mark.parametrize("token", ["ci-secret", "bot-secret"])
def test_200_page_loads_by_a_principal_that_may_not_read_start_no_read(token: str) -> None:
    ledger = CountingLedger()
    client = signed_in(create_app(services(ledger)), token)
    statuses = {client.get(PAGES[n % len(PAGES)]).status_code for n in range(200)}
    assert ledger.reads == [], ledger.reads
    assert statuses <= {200, 403, 404}, statuses


def test_an_owner_page_reads_its_own_records_once_the_list_answered() -> None:
    ledger = CountingLedger()
    app = create_app(services(ledger))
    client = signed_in(app, "owner-secret")
    assert client.get("/ui/watches").status_code == 200
    assert ledger.reads == [], "nothing listed: no receipts to read"
    watcher = {
        "watcher_id": "w-1",
        "purpose": "ops.alert",
        "source": {"kind": "event", "source_id": "ci.pipeline", "event_type": "build.finished",
                   "max_age": "10m"},
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "in-app"},
        "expires_at": "2099-01-01T00:00:00Z",
    }  # fmt: skip
    api = TestClient(app)
    headers = {"Authorization": "Bearer owner-secret", "Vigil-Protocol-Version": "1"}
    made = api.post("/v1/watches", json=watcher, headers=headers)
    assert made.status_code == 201, made.text
    assert client.get("/ui/watches").status_code == 200
    assert client.get("/ui/deliveries").status_code == 200
    assert ledger.reads == ["latest", "deliveries"]


def test_a_signed_in_principal_over_its_rate_gets_429_with_retry_after() -> None:
    app = create_app(services(CountingLedger(), limiter=RateLimiter(0.01, 5)))
    client = signed_in(app, "owner-secret")
    answers = [client.get("/ui/watches") for _ in range(8)]
    refused = [a for a in answers if a.status_code == 429]
    assert refused and int(refused[0].headers["retry-after"]) >= 1
    api = TestClient(app)
    headers = {"Authorization": "Bearer owner-secret", "Vigil-Protocol-Version": "1"}
    shared = api.get("/v1/watches", headers=headers)
    assert shared.status_code == 429, "the console and the API spend one budget"
    assert shared.json()["error"]["code"] == "rate_limited" and "retry-after" in shared.headers


def test_sign_in_attempts_are_throttled_per_client_address() -> None:
    app = create_app(services(CountingLedger(), sign_ins=RateLimiter(1 / 60, 3)))
    client = TestClient(app, base_url="https://testserver", follow_redirects=False)
    found = _CSRF.search(client.get("/ui/sign-in").text)
    assert found is not None
    tries = [
        client.post("/ui/sign-in", data={"token": f"guess-{n}", "csrf": found.group(1)})
        for n in range(6)
    ]
    assert [t.status_code for t in tries] == [401, 401, 401, 429, 429, 429]
    assert int(tries[-1].headers["retry-after"]) >= 1
    late = client.post("/ui/sign-in", data={"token": "owner-secret", "csrf": found.group(1)})
    assert late.status_code == 429, "even the right token waits: guessing stays slow"
