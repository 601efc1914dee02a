"""Governed tools: the registry's exact pinning, timeouts, concurrency limit and metrics;
http.json@v1's categorical errors; the pinned evaluators' tenant, session and placement rules."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from pipeline.config import ToolConfig
from pipeline.records.ticker_state import PinnedState, state_key
from pipeline.rules.outcomes import ErrorCode
from producers.ticker.tools import (
    REGISTERED,
    HttpJsonTool,
    PinnedEvaluator,
    ToolMetrics,
    ToolRegistry,
    ToolRequest,
    ToolResult,
    build_registry,
    state_from_event,
)
from producers.ticker.tools.pinned import AGENT_SESSION, WORKFLOW_RUN

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def request(tool: str = "fake@v1", **overrides: Any) -> ToolRequest:
    fields: dict[str, Any] = {
        "tool": tool,
        "tenant_id": "acme",
        "user_id": "u-1",
        "watcher_id": "w-1",
        "source_id": "status.page",
        "scheduled_at": NOW,
    }
    fields.update(overrides)
    return ToolRequest(**fields)


class FakeTool:
    """A tool whose behaviour each test scripts; it records concurrency."""

    def __init__(
        self,
        answer: Callable[[ToolRequest], ToolResult],
        key: str = "fake@v1",
        timeout: timedelta = timedelta(seconds=5),
    ) -> None:
        self._answer = answer
        self._key = key
        self._timeout = timeout
        self.calls = 0
        self.running = 0
        self.peak = 0
        self._lock = threading.Lock()

    @property
    def key(self) -> str:
        return self._key

    @property
    def timeout(self) -> timedelta:
        return self._timeout

    def call(self, req: ToolRequest) -> ToolResult:
        with self._lock:
            self.calls += 1
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            return self._answer(req)
        finally:
            with self._lock:
                self.running -= 1


# --- the registry ---------------------------------------------------------------------------


def test_registry_unregistered_version_is_unavailable_never_another_version() -> None:
    tool = FakeTool(lambda r: ToolResult.ok({"v": 1}), key="fake@v1")
    registry = ToolRegistry([tool])
    assert registry.call(request("fake@v2")) == ToolResult.failed(ErrorCode.UNAVAILABLE)
    assert tool.calls == 0
    assert registry.keys == frozenset({"fake@v1"})


def test_registry_tool_that_raises_or_breaks_contract_is_internal() -> None:
    def boom(_: ToolRequest) -> ToolResult:
        raise RuntimeError("secret detail")

    registry = ToolRegistry(
        [
            FakeTool(boom, key="boom@v1"),
            FakeTool(lambda r: ToolResult(None, None), key="empty@v1"),
            FakeTool(lambda r: ToolResult.ok({}, tokens=-1), key="negative@v1"),
        ]
    )
    results = registry.call_all([request("boom@v1"), request("empty@v1"), request("negative@v1")])
    assert [r.error for r in results] == [ErrorCode.INTERNAL] * 3


def test_registry_call_past_timeout_answers_timeout_without_waiting_for_it() -> None:
    release = threading.Event()

    def slow(_: ToolRequest) -> ToolResult:
        release.wait(5)
        return ToolResult.ok({"late": True})

    tool = FakeTool(slow, timeout=timedelta(milliseconds=100))
    registry = ToolRegistry([tool])
    try:
        assert registry.call(request()) == ToolResult.failed(ErrorCode.TIMEOUT)
        assert not release.is_set()  # answered while the call was still running
    finally:
        release.set()
        registry.close()


def test_registry_stuck_calls_never_block_the_next_call_all() -> None:
    release = threading.Event()

    def stuck(_: ToolRequest) -> ToolResult:
        release.wait(30)
        return ToolResult.ok({"late": True})

    slow = FakeTool(stuck, key="stuck@v1", timeout=timedelta(milliseconds=100))
    fast = FakeTool(lambda r: ToolResult.ok({"w": r.watcher_id}), key="fast@v1")
    registry = ToolRegistry([slow, fast], concurrency=2, max_abandoned=4)
    try:
        first = registry.call_all([request("stuck@v1"), request("stuck@v1")])
        assert [r.error for r in first] == [ErrorCode.TIMEOUT] * 2
        assert registry.abandoned == 2  # both workers hold a stuck call: both were replaced
        began = time.monotonic()
        second = registry.call_all([request("fast@v1", watcher_id=f"w-{i}") for i in range(4)])
        assert [r.payload for r in second] == [{"w": f"w-{i}"} for i in range(4)]
        assert time.monotonic() - began < 5  # generous: not held behind the stuck calls
        registry.call_all([request("stuck@v1"), request("stuck@v1")])
        # Four abandoned calls still running: the broken tool gets no more threads.
        assert registry.call(request("stuck@v1")) == ToolResult.failed(ErrorCode.UNAVAILABLE)
        assert slow.calls == 4
    finally:
        release.set()
        registry.close()
    deadline = time.monotonic() + 10
    while registry.abandoned and time.monotonic() < deadline:
        time.sleep(0.01)
    assert registry.abandoned == 0  # released calls end their retired workers


def test_registry_runs_at_most_concurrency_calls_at_once_and_keeps_order() -> None:
    def echo(req: ToolRequest) -> ToolResult:
        time.sleep(0.02)
        return ToolResult.ok({"w": req.watcher_id})

    tool = FakeTool(echo)
    registry = ToolRegistry([tool], concurrency=3)
    try:
        results = registry.call_all([request(watcher_id=f"w-{i}") for i in range(12)])
    finally:
        registry.close()
    assert [r.payload for r in results] == [{"w": f"w-{i}"} for i in range(12)]
    assert tool.peak <= 3 and tool.calls == 12


def test_registry_metrics_count_latency_and_errors_by_code() -> None:
    prom = CollectorRegistry()
    registry = ToolRegistry(
        [FakeTool(lambda r: ToolResult.failed(ErrorCode.HTTP_5XX))],
        metrics=ToolMetrics.create(prom),
    )
    registry.call_all([request(), request()])
    labels = {"tool": "fake@v1", "code": "http_5xx"}
    assert prom.get_sample_value("vigil_tool_errors_total", labels) == 2
    assert prom.get_sample_value("vigil_tool_latency_seconds_count", {"tool": "fake@v1"}) == 2


# --- http.json@v1 ---------------------------------------------------------------------------

STATUS = ToolConfig(kind="http.json@v1", url="http://status.test/api.json")


def http_tool(
    handler: Callable[[httpx.Request], httpx.Response],
    instances: dict[str, ToolConfig] | None = None,
    environ: dict[str, str] | None = None,
) -> HttpJsonTool:
    client = httpx.Client(transport=httpx.MockTransport(handler), follow_redirects=False)
    return HttpJsonTool(
        {"status-page": STATUS} if instances is None else instances, client=client, environ=environ
    )


def http_request(tool_ref: str | None = "status-page") -> ToolRequest:
    return request("http.json@v1", tool_ref=tool_ref)


def test_http_json_gets_the_configured_url_and_returns_its_object() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, json={"status": "down", "n": 3})

    result = http_tool(handler).call(http_request())
    assert result == ToolResult.ok({"status": "down", "n": 3})
    assert [(r.method, str(r.url)) for r in seen] == [("GET", "http://status.test/api.json")]


def test_http_json_bearer_token_comes_from_the_configured_environment_variable() -> None:
    config = ToolConfig(kind="http.json@v1", url="http://status.test/a", token_env="STATUS_TOKEN")
    seen: list[str | None] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req.headers.get("authorization"))
        return httpx.Response(200, json={})

    tool = http_tool(handler, {"status-page": config}, {"STATUS_TOKEN": "s3cret"})
    assert tool.call(http_request()).error is None
    assert seen == ["Bearer s3cret"]
    unset = http_tool(handler, {"status-page": config}, {})
    assert unset.call(http_request()) == ToolResult.failed(ErrorCode.UNAVAILABLE)


@pytest.mark.parametrize(
    ("response", "code"),
    [
        (httpx.Response(500, text="private"), ErrorCode.HTTP_5XX),
        (httpx.Response(429), ErrorCode.HTTP_429),
        (httpx.Response(410), ErrorCode.HTTP_410),
        (httpx.Response(404), ErrorCode.HTTP_4XX),
        (httpx.Response(302, headers={"location": "http://elsewhere.test/"}), ErrorCode.REJECTED),
        (httpx.Response(200, text="not json"), ErrorCode.REJECTED),
        (httpx.Response(200, json=[1, 2]), ErrorCode.REJECTED),
        (httpx.Response(200, text='{"x": NaN}'), ErrorCode.REJECTED),
        (httpx.Response(200, text='{"x": 9007199254740993}'), ErrorCode.REJECTED),
    ],
)
def test_http_json_failures_become_categorical_codes(
    response: httpx.Response, code: ErrorCode
) -> None:
    assert http_tool(lambda _: response).call(http_request()) == ToolResult.failed(code)


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (httpx.ConnectTimeout("t"), ErrorCode.TIMEOUT),
        (httpx.ConnectError("refused"), ErrorCode.CONNECT),
    ],
)
def test_http_json_transport_failures_become_codes(exc: Exception, code: ErrorCode) -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        raise exc

    assert http_tool(handler).call(http_request()) == ToolResult.failed(code)


def test_http_json_unknown_or_other_version_instance_is_unavailable() -> None:
    calls: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(req)
        return httpx.Response(200, json={})

    v2 = ToolConfig(kind="http.json@v2", url="http://status.test/v2")
    tool = http_tool(handler, {"status-page": v2})
    assert tool.call(http_request()) == ToolResult.failed(ErrorCode.UNAVAILABLE)
    assert tool.call(http_request("other")) == ToolResult.failed(ErrorCode.UNAVAILABLE)
    assert tool.call(http_request(None)) == ToolResult.failed(ErrorCode.REJECTED)
    assert calls == []


# --- pinned evaluators ----------------------------------------------------------------------


class Table:
    def __init__(self, *states: PinnedState) -> None:
        self.states = {s.key: s for s in states}

    def latest(self, event_type: str, tenant_id: str, subject_id: str) -> PinnedState | None:
        return self.states.get(state_key(event_type, tenant_id, subject_id))


def run_state(tenant: str, run_id: str, status: str) -> PinnedState:
    payload = {"tenant_id": tenant, "run_id": run_id, "status": status}
    state = state_from_event("workflow.run.status", tenant, f"run:{run_id}", "e-1", NOW, payload)
    assert state is not None
    return state


def run_request(tenant: str = "acme", run_id: str = "r-81", **overrides: Any) -> ToolRequest:
    fields = {"tenant_id": tenant, "source_id": f"run:{run_id}", "target": run_id, **overrides}
    return request("workflow.run.status@v1", **fields)


def test_run_status_answers_the_latest_state_of_the_same_tenant_only() -> None:
    evaluator = PinnedEvaluator(WORKFLOW_RUN, Table(run_state("acme", "r-81", "succeeded")))
    assert evaluator.call(run_request()) == ToolResult.ok(
        {"tenant_id": "acme", "run_id": "r-81", "status": "succeeded"}
    )
    other = evaluator.call(run_request(tenant="globex"))
    assert other == ToolResult.failed(ErrorCode.UNAVAILABLE)


def test_run_status_off_convention_source_is_rejected_and_unknown_run_unavailable() -> None:
    evaluator = PinnedEvaluator(WORKFLOW_RUN, Table(run_state("acme", "r-81", "running")))
    assert evaluator.call(run_request(source_id="status.page")).error is ErrorCode.REJECTED
    assert evaluator.call(run_request(target=None)).error is ErrorCode.REJECTED
    assert evaluator.call(run_request(run_id="r-82")).error is ErrorCode.UNAVAILABLE


def test_session_state_reads_only_the_watch_owning_session() -> None:
    payload = {"tenant_id": "acme", "session_id": "s-1", "state": "idle"}
    state = state_from_event("agent.session.state", "acme", "session:s-1", "e-1", NOW, payload)
    assert state is not None
    evaluator = PinnedEvaluator(AGENT_SESSION, Table(state))
    base = {"tenant_id": "acme", "source_id": "session:s-1", "target": "s-1"}
    own = evaluator.call(request("agent.session.state@v1", **base, session_id="s-1"))
    assert own.payload == payload
    other = evaluator.call(request("agent.session.state@v1", **base, session_id="s-2"))
    assert other.error is ErrorCode.REJECTED


@pytest.mark.parametrize(
    ("event_type", "tenant", "source_id", "payload"),
    [
        ("build.finished", "a", "run:r-1", {"tenant_id": "a", "run_id": "r-1", "status": "x"}),
        ("workflow.run.status", "a", "run:r-2", {"run_id": "r-1", "status": "x"}),
        (
            "workflow.run.status",
            None,
            "run:r-1",
            {"tenant_id": "a", "run_id": "r-1", "status": "x"},
        ),
        ("workflow.run.status", "a", "run:r-1", {"tenant_id": "b", "run_id": "r-1", "status": "x"}),
        ("workflow.run.status", "a", "run:r-1", {"tenant_id": "a", "run_id": "r-1", "status": 3}),
    ],
)
def test_state_from_event_ignores_events_that_do_not_feed_an_evaluator(
    event_type: str, tenant: str | None, source_id: str, payload: dict[str, Any]
) -> None:
    assert state_from_event(event_type, tenant, source_id, "e-1", NOW, payload) is None


def test_a_state_belongs_to_its_records_tenant_not_to_one_its_payload_leaves_out() -> None:
    payload = {"run_id": "r-81", "status": "succeeded"}
    state = state_from_event("workflow.run.status", "acme", "run:r-81", "e-1", NOW, payload)
    assert state is not None and state.tenant_id == "acme"
    evaluator = PinnedEvaluator(WORKFLOW_RUN, Table(state))
    assert evaluator.call(run_request()) == ToolResult.ok(payload)
    assert evaluator.call(run_request(tenant="globex")).error is ErrorCode.UNAVAILABLE


def test_state_newer_than_keeps_latest_observation() -> None:
    old = run_state("acme", "r-1", "running")
    new = replace(old, event_id="e-2", observed_at=NOW + timedelta(seconds=1))
    assert new.newer_than(old) and not old.newer_than(new)
    assert old.newer_than(None)


def test_build_registry_registers_exactly_the_shipped_pinned_pairs() -> None:
    registry = build_registry({}, Table())
    assert (
        registry.keys
        == REGISTERED
        == frozenset({"http.json@v1", "workflow.run.status@v1", "agent.session.state@v1"})
    )
