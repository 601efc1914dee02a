"""Bearer tokens to principals, the protocol header, and the API's error vocabulary; and the
app's order of refusals over an in-memory command processor (the pure ``apply``)."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pipeline.config import parse_config
from pipeline.control.http.api import ApiServices, create_app
from pipeline.control.http.auth import (
    ApiCode,
    ApiError,
    TokenDirectory,
    check_protocol,
    from_command_error,
    status_of,
)
from pipeline.rules.authz import Action, Principal, Role
from pipeline.rules.commands import apply
from pipeline.rules.commands.model import (
    Command,
    CommandError,
    CommandResult,
    CommandVerb,
    GrantRecord,
    GrantSpec,
    RegistryEntry,
    ResultCode,
)

pytestmark = pytest.mark.unit


def directory() -> TokenDirectory:
    def entry(token: str, role: str, **extra: str) -> dict[str, str]:
        digest = hashlib.sha256(token.encode()).hexdigest()
        return {"token_sha256": digest, "role": role, "tenant_id": "acme", "user_id": "u-1"} | extra

    config = parse_config(
        {
            "principals": {
                "owner": entry("owner-secret", "user"),
                "bot": entry("bot-secret", "agent", session_id="s-1"),
            }
        }
    )
    return TokenDirectory.from_config(config.principals)


def refusal(call: Callable[..., object], *args: object) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args)
    return caught.value


def test_a_configured_token_authenticates_as_its_principal_with_role_and_session() -> None:
    found = directory().authenticate("Bearer bot-secret")
    assert (found.name, found.role, found.session_id) == ("bot", Role.AGENT, "s-1")
    assert directory().authenticate("bearer   owner-secret ").name == "owner"


@pytest.mark.parametrize(
    "header", [None, "", "Bearer", "Basic b3duZXItc2VjcmV0", "Bearer owner-secreT", "owner-secret"]
)
def test_a_missing_malformed_or_unknown_token_is_unauthenticated_401(header: str | None) -> None:
    error = refusal(directory().authenticate, header)
    assert (error.code, error.status, error.field) == (
        ApiCode.UNAUTHENTICATED,
        401,
        "Authorization",
    )


def test_a_principal_is_found_by_its_configured_name() -> None:
    tokens = directory()
    bot = tokens.principal("bot")
    assert bot is not None and bot.role is Role.AGENT
    assert tokens.principal("nobody") is None
    assert len(tokens) == 2


@pytest.mark.parametrize("value", [None, "2", "", "1.0", "v1"])
def test_a_missing_or_other_protocol_version_is_refused_400(value: str | None) -> None:
    error = refusal(check_protocol, value)
    assert (error.code, error.status) == (ApiCode.PROTOCOL_VERSION, 400)
    assert error.body()["error"]["field"] == "Vigil-Protocol-Version"


def test_protocol_version_one_is_accepted() -> None:
    check_protocol("1")
    check_protocol(" 1 ")


@pytest.mark.parametrize(
    ("code", "api", "status"),
    [
        (ResultCode.INVALID, ApiCode.INVALID, 422),
        (ResultCode.DENIED, ApiCode.DENIED, 403),
        (ResultCode.NOT_FOUND, ApiCode.NOT_FOUND, 404),
        (ResultCode.CONFLICT, ApiCode.CONFLICT, 409),
        (ResultCode.STALE_REVISION, ApiCode.STALE_REVISION, 409),
        (ResultCode.CAP_REACHED, ApiCode.CAP_REACHED, 409),
    ],
)
def test_each_processor_refusal_maps_to_its_api_code_and_status(
    code: ResultCode, api: ApiCode, status: int
) -> None:
    error = from_command_error(CommandError(code=code, message="m", field="f"))
    assert (error.code, error.status) == (api, status)
    assert error.body() == {"error": {"code": api.value, "message": "m", "field": "f"}}


def test_every_api_code_has_a_status() -> None:
    assert {code: status_of(code) for code in ApiCode}[ApiCode.UNAVAILABLE] == 503
    assert all(400 <= status_of(code) < 600 for code in ApiCode)


# --- the app: the order of refusals, over an in-memory command processor ----------------------


class MemoryProcessor:
    """A real, small command port: the pure ``apply`` over in-memory registry and grants."""

    def __init__(self) -> None:
        self.views: dict[tuple[str, str], dict[str, RegistryEntry]] = {}
        self.grants: dict[str, GrantRecord] = {}
        self._ids = itertools.count()

    def command(
        self, verb: CommandVerb, principal: Principal, tenant_id: str, user_id: str, **fields: Any
    ) -> Command:
        return Command(
            request_id=f"r-{next(self._ids)}",
            verb=verb,
            principal=principal,
            tenant_id=tenant_id,
            user_id=user_id,
            issued_at=NOW,
            **fields,
        )

    def send(self, command: Command) -> CommandResult:
        view = self.views.setdefault((command.tenant_id, command.user_id), {})
        outcome = apply(command, view, self.grants, NOW)
        for watcher_id, entry in outcome.registry:
            if entry is None:
                view.pop(watcher_id, None)
            else:
                view[watcher_id] = entry
        for grant_id, record in outcome.grants:
            if record is None:
                self.grants.pop(grant_id, None)
            else:
                self.grants[grant_id] = record
        return outcome.result


class NoLedger:
    """A :class:`LedgerPort` with nothing in it (these tests read no ledger route)."""

    def evaluations(
        self, tenant_id: str, user_id: str, watcher_id: str, source_id: str, limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        return [], 0

    def latest(
        self, tenant_id: str, user_id: str, source_ids: Iterable[str] | None = None
    ) -> dict[str, dict[str, Any]]:
        return {}

    def lifecycle(self, tenant_id: str, user_id: str, watcher_id: str) -> list[dict[str, Any]]:
        return []

    def notifications(self, tenant_id: str, user_id: str) -> tuple[list[dict[str, Any]], int]:
        return [], 0

    def ack(self, tenant_id: str, user_id: str, delivery_key: str) -> dict[str, Any] | None:
        return None

    def deliveries(
        self, tenant_id: str, user_id: str, state: str | None, watcher_id: str | None
    ) -> list[dict[str, Any]]:
        return []

    def delivery(self, tenant_id: str, user_id: str, delivery_key: str) -> dict[str, Any] | None:
        return None

    def ready(self) -> str | None:
        return "no broker in unit tests"


def refuse_schedules(who: Principal) -> Any:
    raise AssertionError("schedules are not used here")


NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
WATCH = {
    "watcher_id": "aw-1",
    "purpose": "agent.watch",
    "mode": "once",
    "source": {
        "kind": "polling",
        "source_id": "run:r-1",
        "tool": "workflow.run.status@v1",
        "target": "r-1",
        "cadence": "5m",
        "max_age": "2m",
    },
    "condition": {"eq": ["status", "succeeded"]},
    "terminal_condition": {"eq": ["status", "failed"]},
    "delivery": {"target": "in-app"},
    "window": "1h",
}


@pytest.fixture
def app() -> Iterator[TestClient]:
    processor = MemoryProcessor()
    services = ApiServices(
        tokens=directory(),
        commands=processor,
        ledger=NoLedger(),
        schedules=refuse_schedules,
    )
    operator = Principal(name="op", role=Role.OPERATOR, tenant_id="acme", user_id="ops")
    grant = processor.command(
        CommandVerb.GRANT_ADD,
        operator,
        "acme",
        "u-1",
        grant=GrantSpec(
            tenant_id="acme",
            user_id="u-1",
            purpose="agent.watch",
            sources=("run:r-1",),
            tools=("workflow.run.status@v1",),
            targets=("in-app",),
            actions=(Action.PROPOSE, Action.APPROVE, Action.MANAGE),
            until=NOW + timedelta(days=1),
        ),
    )
    assert processor.send(grant).ok
    with TestClient(create_app(services)) as client:
        yield client


def headers(token: str | None = "owner-secret", protocol: str | None = "1") -> dict[str, str]:
    out = {}
    if token is not None:
        out["Authorization"] = f"Bearer {token}"
    if protocol is not None:
        out["Vigil-Protocol-Version"] = protocol
    return out


def code_of(response: Any) -> tuple[int, str]:
    body = response.json()
    assert set(body["error"]) == {"code", "message", "field"}
    return response.status_code, body["error"]["code"]


def test_the_protocol_is_checked_before_the_token_and_the_token_before_the_body(
    app: TestClient,
) -> None:
    bad_body = {"watcher_id": 7}
    path = "/v1/watches:propose"
    assert code_of(app.post(path, json=bad_body, headers=headers(None, None))) == (
        400,
        "protocol_version",
    )
    assert code_of(app.post(path, json=bad_body, headers=headers("nope", "2")))[0] == 400
    assert code_of(app.post(path, json=bad_body, headers=headers(None))) == (401, "unauthenticated")
    invalid = app.post(path, json=bad_body, headers=headers())
    assert code_of(invalid) == (422, "invalid")
    assert invalid.json()["error"]["field"] == "watcher_id"


def test_an_agent_proposal_takes_its_session_and_only_the_owner_approves(app: TestClient) -> None:
    made = app.post("/v1/watches:propose", json=WATCH, headers=headers("bot-secret"))
    assert (made.status_code, made.json()["session_id"]) == (201, "s-1")
    again = app.post("/v1/watches:propose", json=WATCH, headers=headers("bot-secret"))
    assert (again.status_code, again.json()["collapsed"]) == (200, True)
    denied = app.post("/v1/watches/aw-1:approve", headers=headers("bot-secret"))
    assert code_of(denied) == (403, "denied")
    approved = app.post("/v1/watches/aw-1:approve", headers=headers())
    assert (approved.status_code, approved.json()["status"]) == (200, "active")


def test_an_unknown_path_and_an_unready_broker_answer_in_the_error_shape(app: TestClient) -> None:
    assert code_of(app.get("/v2/nothing")) == (404, "not_found")
    assert code_of(app.get("/readyz")) == (503, "unavailable")
    assert app.get("/healthz").json() == {"status": "ok"}
