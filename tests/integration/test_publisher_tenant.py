"""Publishers belong to a tenant (DESIGN.md §10), end to end: events posted to the real API by
publisher principals of two tenants, read by the real poll ticker and decided by the real
evaluator, on the real broker and Redis.

A publisher of ``globex`` posts "succeeded" for the runs ``acme``'s agent watches are waiting
on — once with a payload that claims ``acme``, once with no tenant in its payload. Neither
satisfies ``acme``'s watches: their polls stay unavailable and nothing reaches the outbox. The
same "succeeded" posted by ``acme``'s own publisher satisfies the watch on its run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from pipeline.cli.api_cmd import build_services
from pipeline.clock import ManualClock
from pipeline.config import parse_config
from pipeline.control.http.api import create_app
from producers.ticker.tools import PinnedEvaluator, ToolRequest
from producers.ticker.tools.pinned import WORKFLOW_RUN
from tests.integration.api_harness import serve
from tests.integration.ticker_helpers import (
    PARTITIONS,
    TENANT,
    USER,
    Deployment,
    Pipeline,
    agent_watch,
    outbox,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
RUNS = ("r-claimed", "r-silent")
PUBLISHERS = {"acme-ci": TENANT, "globex-ci": "globex"}


def token(name: str) -> str:
    return f"token-{name}-publisher"


def api_config(deployment: Deployment) -> Any:
    principals = {
        name: {
            "token_sha256": hashlib.sha256(token(name).encode()).hexdigest(),
            "role": "publisher",
            "tenant_id": tenant,
            "user_id": "ci",
            "sources": [f"run:{run}" for run in RUNS],
        }
        for name, tenant in PUBLISHERS.items()
    }
    kafka = {
        "bootstrap_servers": deployment.bootstrap,
        "topic_prefix": deployment.topology.prefix,
        "partitions": PARTITIONS,
    }
    return parse_config({"kafka": kafka, "principals": principals})


@pytest.fixture
def api(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Iterator[Any]:
    deployment = Deployment(kafka_bootstrap, unique_name("tenant") + ".")
    services, close = build_services(api_config(deployment), pool_size=1)
    try:
        with serve(create_app(services)) as url, httpx.Client(base_url=url, timeout=60) as http:
            yield deployment, http
    finally:
        close()


def post(http: httpx.Client, publisher: str, run: str, payload: dict[str, Any]) -> None:
    event = {
        "source_id": f"run:{run}",
        "event_type": "workflow.run.status",
        "event_id": f"{publisher}-{run}-{payload['status']}-{len(payload)}",
        "observed_at": T0.isoformat().replace("+00:00", "Z"),
        "payload": payload,
    }
    headers = {"Authorization": f"Bearer {token(publisher)}", "Vigil-Protocol-Version": "1"}
    answer = http.post("/v1/events", json={"events": [event]}, headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["accepted"] == 1, answer.text


def test_a_publisher_of_another_tenant_cannot_satisfy_a_pinned_watch(
    api: Any, redis_url: str
) -> None:
    deployment, http = api
    for run in RUNS:
        deployment.watcher(agent_watch(f"w-{run}", run), T0)
    sources = {f"run:{run}" for run in RUNS}
    deployment.grant(sources, {"workflow.run.status@v1"}, "agent.watch", {"in-app"})
    # globex's publisher: one payload claims acme, one names no tenant at all.
    post(http, "globex-ci", "r-claimed", {"tenant_id": TENANT, "run_id": "r-claimed",
                                          "status": "succeeded"})  # fmt: skip
    post(http, "globex-ci", "r-silent", {"run_id": "r-silent", "status": "succeeded"})
    clock = ManualClock(T0 + timedelta(seconds=1))
    pipeline = Pipeline(deployment, clock, redis_url)
    states = pipeline.ticker.states
    try:
        pipeline.step(
            lambda: states.latest("workflow.run.status", "globex", "r-silent") is not None
        )
        for minute in range(1, 4):
            clock.set(T0 + minute * MIN + timedelta(milliseconds=500))
            pipeline.step()
        assert [pipeline.run_status(run) for run in RUNS] == [None, None]
        assert states.latest("workflow.run.status", "globex", "r-claimed") is None
        stored = states.latest("workflow.run.status", "globex", "r-silent")
        assert stored is not None and stored.tenant_id == "globex"
        request = ToolRequest(
            tool="workflow.run.status@v1", tenant_id=TENANT, user_id=USER,
            watcher_id="w-r-silent", source_id="run:r-silent", scheduled_at=clock.now(),
            target="r-silent", session_id="s-1",
        )  # fmt: skip
        assert PinnedEvaluator(WORKFLOW_RUN, states).call(request).payload is None
        assert outbox(deployment) == [], "another tenant's publisher satisfied acme's watch"
        # acme's own publisher, the same words: the watch on its run is satisfied.
        post(http, "acme-ci", "r-silent", {"run_id": "r-silent", "status": "succeeded"})
        pipeline.step(lambda: pipeline.run_status("r-silent") == "succeeded")
        for minute in range(4, 7):
            clock.set(T0 + minute * MIN + timedelta(milliseconds=500))
            pipeline.step()
        entries = outbox(deployment)
        assert [e["watcher_id"] for e in entries] == ["w-r-silent"]
    finally:
        pipeline.close()
