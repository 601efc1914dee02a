"""mode: change end to end: the real ticker calls a real HTTP tool that answers down, down, down,
up, down; the real evaluator on the real broker notifies twice (and once ``resolved``), and
replay of what it wrote reproduces every decision."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis

from pipeline.clock import ManualClock
from pipeline.config import ToolConfig
from pipeline.kafka.scan import Bound
from pipeline.ops.replay_reader import Scope, read_history
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.receipts import Receipt
from pipeline.rules.replay import replay
from pipeline.rules.replay_model import DefinitionVersion
from tests.integration.evaluator_helpers import receipts, wait_for
from tests.integration.ticker_helpers import (
    TENANT,
    USER,
    Deployment,
    Pipeline,
    StatusServer,
    http_definition,
    outbox,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
ANSWERS = ["down", "down", "down", "up", "down"]


@pytest.fixture
def deployment(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Iterator[Deployment]:
    yield Deployment(kafka_bootstrap, unique_name("change") + ".")


def ticked(deployment: Deployment, count: int) -> bool:
    return len(deployment.ticks()) >= count


def decisions(deployment: Deployment) -> list[Receipt]:
    return [r for r, _ in receipts(deployment.bootstrap, deployment.topology)]


def test_a_site_that_stays_down_notifies_once_and_again_after_it_came_back_up(
    deployment: Deployment, redis_url: str, unique_name: Callable[[str], str]
) -> None:
    definition = http_definition(
        "site-down", "status.site", mode="change", change={"resolved": True}
    )
    deployment.watcher(definition, T0 - MIN / 2)
    deployment.grant({"status.site"}, {"status-page"}, "ops.alert", {"ops-hook"})
    answer = {"status": "down"}
    tool = StatusServer(lambda: dict(answer))
    clock = ManualClock(T0 + timedelta(milliseconds=500))
    options = {
        "tools": {"status-page": ToolConfig(kind="http.json@v1", url=tool.url)},
        "budgets": RedisBudgets(redis.Redis.from_url(redis_url), key_prefix=unique_name("b")),
        "default_caps": BudgetCaps(window=timedelta(hours=1), evaluations=1000),
    }
    pipeline = Pipeline(deployment, clock, redis_url, **options)
    try:
        for written, status in enumerate(ANSWERS, start=1):
            answer["status"] = status
            pipeline.step(functools.partial(ticked, deployment, written))
            clock.advance(MIN)
        wait_for(lambda: len(decisions(deployment)) >= len(ANSWERS), what="five decisions")
    finally:
        pipeline.close()
        tool.close()
    assert tool.calls == len(ANSWERS)

    made = sorted(decisions(deployment), key=lambda r: r.trigger["scheduled_at"])
    assert [r.note for r in made] == [
        "change: firing",
        "change: quiet",
        "change: quiet",
        "change: resolved",
        "change: firing",
    ]
    entries = sorted(outbox(deployment), key=lambda e: e["trigger"])
    assert [(e["trigger"], e["outcome"]) for e in entries] == [
        ('{"kind":"poll","scheduled_at":"2026-11-29T10:00:00Z"}', "satisfied"),
        ('{"kind":"poll","scheduled_at":"2026-11-29T10:03:00Z"}', "resolved"),
        ('{"kind":"poll","scheduled_at":"2026-11-29T10:04:00Z"}', "satisfied"),
    ]
    assert {e["delivery_key"] for e in entries} == {
        r.delivery_key for r in made if r.delivery_key is not None
    }

    history = read_history(
        deployment.bootstrap,
        deployment.topology,
        Bound.parse("earliest", end=False),
        Bound.parse("latest", end=True),
        Scope.parse("site-down", f"{TENANT}/{USER}"),
        read_at=T0 + 10 * MIN,
    )  # watchers were written as the command processor does, without its definition-log
    logged = {(TENANT, USER, "site-down", 1): DefinitionVersion(definition, T0, T0 - MIN / 2)}
    report = replay(dataclasses.replace(history, definitions=logged))
    assert report.replayed == len(ANSWERS)
    assert report.differences == []
    assert report.fired == {e["delivery_key"] for e in entries}
