"""The poll ticker on a real broker with a ManualClock: missed-run policies across restarts, cron
schedules across DST, and agent watches on a pinned evaluator through to their decision."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from pipeline.clock import ManualClock
from pipeline.kafka.partitioner import partition_for
from pipeline.rules.authz import Action, Grant
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.lifecycle import WatcherStatus
from producers.ticker.loop import PollTicker, TickerDeps, TickerSettings
from tests.integration.ticker_helpers import (
    PARTITIONS,
    TENANT,
    USER,
    Deployment,
    Pipeline,
    StatusServer,
    TickerOnly,
    agent_watch,
    http_definition,
    outbox,
    polling_definition,
    schedule_definition,
    settle,
    walk,
    watcher_status,
)

pytestmark = pytest.mark.integration


# --- fixtures and helpers ----------------------------------------------------------------


@pytest.fixture
def deployment(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Iterator[Deployment]:
    yield Deployment(kafka_bootstrap, unique_name("tick") + ".")


# --- missed runs across restarts -----------------------------------------------------------

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def test_ticker_down_for_five_instants_backfills_by_policy_and_never_duplicates(
    deployment: Deployment, unique_name: Callable[[str], str]
) -> None:
    policies = {"skip": "skip", "latest": "latest", "bounded": {"bounded": 3}}
    for name, missed in policies.items():
        deployment.watcher(polling_definition(f"w-{name}", f"r-{name}", missed), T0 - MIN / 2)
    group = unique_name("ticker")
    clock = ManualClock(T0 + timedelta(milliseconds=500))

    def seen(count: int) -> Callable[[], bool]:
        return lambda: len(deployment.ticks()) >= count

    # Up at 10:00: each watcher ticks 10:00; then down while 10:01..10:05 fall due.
    with deployment.ticker(clock, group) as ticker:
        settle(ticker, seen(3))
    clock.set(T0 + 5 * MIN + timedelta(seconds=30))
    with deployment.ticker(clock, group) as ticker:
        settle(ticker, seen(3 + 1 + 3))
    # Two more restarts at the same instant add nothing; then 10:06 and 10:07 tick once each.
    for _ in range(2):
        with deployment.ticker(clock, group) as ticker:
            settle(ticker)
    for minute in (6, 7):
        clock.set(T0 + minute * MIN + timedelta(seconds=1))
        with deployment.ticker(clock, group) as ticker:
            settle(ticker, seen(7 + 3 * (minute - 5)))

    def at(*minutes: int) -> list[datetime]:
        return [T0 + m * MIN for m in minutes]

    assert deployment.ticks_of("w-skip") == at(0, 6, 7)
    assert deployment.ticks_of("w-latest") == at(0, 5, 6, 7)
    assert deployment.ticks_of("w-bounded") == at(0, 3, 4, 5, 6, 7)

    def counted(policy: str, fate: str) -> float | None:
        labels = {"policy": policy, "fate": fate}
        return deployment.metrics_registry.get_sample_value(
            "vigil_ticker_missed_instants_total", labels
        )

    assert (counted("skip", "fired"), counted("skip", "dropped")) == (None, 5)
    assert (counted("latest", "fired"), counted("latest", "dropped")) == (1, 4)
    assert (counted("bounded", "fired"), counted("bounded", "dropped")) == (3, 2)


# --- schedules across DST ---------------------------------------------------------------------


def test_cron_schedule_fires_once_across_fall_back_and_spring_forward(
    deployment: Deployment, unique_name: Callable[[str], str]
) -> None:
    spring_start = datetime(2026, 3, 7, 20, 0, tzinfo=UTC)
    deployment.watcher(schedule_definition("one-thirty", "30 1 * * *"), spring_start)
    deployment.watcher(schedule_definition("two-thirty", "30 2 * * *"), spring_start)
    clock = ManualClock(spring_start)
    with deployment.ticker(clock, unique_name("ticker")) as ticker:
        settle(ticker)
        walk(ticker, clock, spring_start, datetime(2026, 3, 8, 12, 0, tzinfo=UTC))
        walk(
            ticker,
            clock,
            datetime(2026, 10, 31, 20, 0, tzinfo=UTC),
            datetime(2026, 11, 1, 12, 0, tzinfo=UTC),
        )
    ticks = deployment.ticks()
    assert {t["kind"] for t in ticks} == {"schedule"}
    # The months the walk jumps over were missed: the newest 100 days of each are ticked late
    # (recorded as missed, never fired); the walked nights fire on time.
    jumped = (datetime(2026, 3, 8, 12, 0, tzinfo=UTC), datetime(2026, 10, 31, 20, 0, tzinfo=UTC))
    late = [t for t in ticks if t["late"]]
    assert len(late) == 2 * 100
    assert all(jumped[0] < t["scheduled_at"] < jumped[1] for t in late)

    def on_time(name: str) -> list[datetime]:
        watcher_id = f"schedule:me:{name}"
        return [t["scheduled_at"] for t in ticks if t["watcher_id"] == watcher_id and not t["late"]]

    # 02:30 does not exist on 8 March: it fires once, at 03:00 EDT (07:00Z).
    assert on_time("two-thirty") == [
        datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
        datetime(2026, 11, 1, 7, 30, tzinfo=UTC),
    ]
    # 01:30 happens twice on 1 November: it fires once, at the first (EDT, 05:30Z).
    assert on_time("one-thirty") == [
        datetime(2026, 3, 8, 6, 30, tzinfo=UTC),
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
    ]
    assert all(t["source_id"] == "schedule:me" for t in ticks)


def test_one_shot_missed_while_down_fires_late_exactly_once(
    deployment: Deployment, unique_name: Callable[[str], str]
) -> None:
    body = {
        "watcher_id": "schedule:me:standup",
        "purpose": "schedule.chat",
        "source": {"kind": "schedule", "at": "2026-11-29T12:00:00Z"},
        "delivery": {"target": "me", "verb": "send", "text": "standup"},
    }
    definition = WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER)
    deployment.watcher(definition.with_version(1), T0)
    group = unique_name("ticker")
    clock = ManualClock(datetime(2026, 11, 30, 9, 0, tzinfo=UTC))  # a day late
    for _ in range(2):
        with deployment.ticker(clock, group) as ticker:
            settle(ticker, lambda: len(deployment.ticks()) >= 1)
    (tick,) = deployment.ticks()
    assert tick["late"] is True and tick["kind"] == "schedule"
    assert tick["scheduled_at"] == datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    assert tick["observed_at"] == clock.now()


def test_cron_schedule_down_for_hours_ticks_each_missed_occurrence_late_and_fires_none(
    deployment: Deployment, unique_name: Callable[[str], str]
) -> None:
    """Missed fires never pile up and are never a silent gap: each is a late tick, which the
    evaluator records as ``missed``; the schedule resumes at its next occurrence."""
    deployment.watcher(schedule_definition("hourly", "0 * * * *"), T0)
    group = unique_name("ticker")
    clock = ManualClock(T0 + timedelta(hours=3, seconds=30))  # the ticker was down 3 hours
    with deployment.ticker(clock, group) as ticker:
        settle(ticker, lambda: len(deployment.ticks()) >= 3)
        clock.set(T0 + timedelta(hours=4))
        settle(ticker, lambda: len(deployment.ticks()) >= 4)
    ticks = deployment.ticks()
    hours = [T0 + timedelta(hours=n) for n in (1, 2, 3, 4)]
    assert [t["scheduled_at"] for t in ticks] == hours
    assert [t["late"] for t in ticks] == [True, True, True, False]


# --- agent watches on a pinned evaluator, through the evaluator --------------------------------


LATE_START = T0 + timedelta(seconds=17)  # its deadline, 10:30:17, is not a cadence instant
WATCHES = {"w-ok": ("r-ok", T0), "w-fail": ("r-fail", T0), "w-deadline": ("r-dl", LATE_START)}


def agent_scenario(
    deployment: Deployment,
    clock: ManualClock,
    driver: Pipeline | TickerOnly,
    finished: Callable[[], bool],
) -> None:
    """Three agent watches (30m window, 1m cadence) on runs: r-ok succeeds after three ticks,
    r-fail fails then, r-dl succeeds after its last cadence tick, before its deadline."""
    for watcher_id, (run_id, activated) in WATCHES.items():
        deployment.watcher(agent_watch(watcher_id, run_id), activated)
        deployment.run_state(run_id, "running", T0, f"{run_id}-1")
    deployment.grant(
        {f"run:{run_id}" for run_id, _ in WATCHES.values()},
        {"workflow.run.status@v1"},
        "agent.watch",
        {"in-app"},
    )
    try:
        driver.step(lambda: all(driver.run_status(r) == "running" for r, _ in WATCHES.values()))
        for minute in range(1, 31):
            clock.set(T0 + minute * MIN + timedelta(milliseconds=500))
            driver.step()
            if minute == 3:
                deployment.run_state("r-ok", "succeeded", clock.now(), "r-ok-2")
                deployment.run_state("r-fail", "failed", clock.now(), "r-fail-2")
                driver.step(lambda: driver.run_status("r-fail") == "failed")
        deployment.run_state("r-dl", "succeeded", clock.now(), "r-dl-2")
        driver.step(lambda: driver.run_status("r-dl") == "succeeded")
        clock.set(LATE_START + timedelta(minutes=30, milliseconds=500))
        driver.step(finished)
    finally:
        driver.close()
    polls_ok = [t for t in deployment.ticks() if t["watcher_id"] == "w-ok" and t["kind"] == "poll"]
    assert [t["payload"] for t in polls_ok[:4]] == [
        '{"run_id":"r-ok","status":"running","tenant_id":"acme"}'
    ] * 3 + ['{"run_id":"r-ok","status":"succeeded","tenant_id":"acme"}']


def test_agent_watch_ticks_decide_once_terminal_and_at_deadline_by_pure_evaluate(
    deployment: Deployment,
) -> None:
    from pipeline.records.tick import evidence_from_tick
    from pipeline.rules.budgets import BudgetVerdict
    from pipeline.rules.evaluation import evaluate, recorded_budget
    from pipeline.rules.watcher_state import WatcherState
    from producers.ticker.tools import REGISTERED

    clock = ManualClock(LATE_START)
    driver = TickerOnly(deployment, clock)
    deadline_tick = datetime(2026, 11, 29, 10, 30, 17, tzinfo=UTC)
    agent_scenario(
        deployment,
        clock,
        driver,
        lambda: deadline_tick in deployment.ticks_of("w-deadline"),
    )
    grants = [
        Grant(
            grant_id="g",
            tenant_id=TENANT,
            user_id=USER,
            purpose="agent.watch",
            sources=frozenset(f"run:{r}" for r, _ in WATCHES.values()),
            tools=frozenset({"workflow.run.status@v1"}),
            targets=frozenset({"in-app"}),
            actions=frozenset({Action.EVALUATE, Action.DELIVER}),
            until=datetime(2030, 1, 1, tzinfo=UTC),
        )
    ]
    outcomes: dict[str, tuple[str, list[datetime]]] = {}
    for watcher_id, (run_id, activated) in WATCHES.items():
        definition = agent_watch(watcher_id, run_id)
        state = WatcherState(version=1, status=WatcherStatus.ACTIVE, activated_at=activated)
        notified: list[datetime] = []
        for n, tick in enumerate(t for t in deployment.ticks() if t["watcher_id"] == watcher_id):
            evidence = evidence_from_tick(tick, f"ticks:{n}", deployment.ring)
            result = evaluate(
                definition,
                state,
                evidence,
                grants,
                evidence.observed_at,
                recorded_budget(BudgetVerdict.OK),
                evaluators=REGISTERED,
            )
            state = result.next_state
            if result.outbox is not None:
                assert evidence.scheduled_at is not None
                notified.append(evidence.scheduled_at)
        outcomes[watcher_id] = (state.status.value, notified)
    assert outcomes == {
        "w-ok": ("satisfied", [T0 + 4 * MIN]),
        "w-fail": ("terminal_unsatisfied", []),
        "w-deadline": ("satisfied", [deadline_tick]),
    }
    kinds = [t["kind"] for t in deployment.ticks() if t["watcher_id"] == "w-deadline"]
    assert kinds[-2:] == ["poll", "expiry"]  # the final poll at the deadline, then expiry


def test_agent_watches_through_the_evaluator_notify_once_terminate_and_notify_at_deadline(
    deployment: Deployment, redis_url: str
) -> None:
    clock = ManualClock(LATE_START)
    pipeline = Pipeline(deployment, clock, redis_url)

    def finished() -> bool:
        return len(outbox(deployment)) >= 2 and watcher_status(deployment, "w-deadline") != "active"

    agent_scenario(deployment, clock, pipeline, finished)
    entries = outbox(deployment)
    assert len(entries) == 2
    by_watcher = {e["watcher_id"]: e for e in entries}
    assert by_watcher["w-ok"]["trigger"] == '{"kind":"poll","scheduled_at":"2026-11-29T10:04:00Z"}'
    assert by_watcher["w-deadline"]["trigger"] == (
        '{"kind":"poll","scheduled_at":"2026-11-29T10:30:17Z"}'
    )
    assert watcher_status(deployment, "w-ok") == "satisfied"
    assert watcher_status(deployment, "w-fail") == "terminal_unsatisfied"
    assert watcher_status(deployment, "w-deadline") == "satisfied"


# --- grants and budgets are rechecked before a tool is called ---------------------------------


@pytest.fixture
def status_server() -> Iterator[StatusServer]:
    server = StatusServer()
    yield server
    server.close()


def test_revoked_grant_or_spent_budget_means_no_tool_call(
    deployment: Deployment,
    status_server: StatusServer,
    redis_url: str,
    unique_name: Callable[[str], str],
) -> None:
    import redis

    from pipeline.config import ToolConfig
    from pipeline.redis.budgets import RedisBudgets
    from pipeline.rules.budgets import BudgetCaps

    deployment.watcher(http_definition("w-granted", "status.a"), T0 - MIN / 2)
    deployment.watcher(http_definition("w-ungranted", "status.b"), T0 - MIN / 2)
    spent = http_definition("w-spent", "status.c", budgets={"window": "1h", "evaluations": 0})
    deployment.watcher(spent, T0 - MIN / 2)
    deployment.grant({"status.a", "status.c"}, {"status-page"}, "ops.alert", {"ops-hook"})
    budgets = RedisBudgets(redis.Redis.from_url(redis_url), key_prefix=unique_name("b") + ":")
    tools = {"status-page": ToolConfig(kind="http.json@v1", url=status_server.url)}
    clock = ManualClock(T0 + timedelta(milliseconds=500))
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=1000)
    group = unique_name("ticker")
    with deployment.ticker(clock, group, tools=tools, budgets=budgets, default_caps=caps) as ticker:
        settle(ticker, lambda: len(deployment.ticks()) >= 3)
    ticks = {t["watcher_id"]: t for t in deployment.ticks()}
    assert status_server.calls == 1
    assert (ticks["w-granted"]["payload"], ticks["w-granted"]["tool_error"]) == (
        '{"status":"down"}',
        None,
    )
    for withheld in ("w-ungranted", "w-spent"):
        assert (ticks[withheld]["payload"], ticks[withheld]["tool_error"]) == (None, "rejected")
    sample = deployment.metrics_registry.get_sample_value
    assert sample("vigil_ticker_tool_calls_withheld_total", {"reason": "authorization_denied"}) == 1
    assert sample("vigil_ticker_tool_calls_withheld_total", {"reason": "budget_exhausted"}) == 1
    assert sample("vigil_tool_latency_seconds_count", {"tool": "http.json@v1"}) == 1


def test_budget_store_down_defers_the_tick_and_calls_nothing(
    deployment: Deployment, status_server: StatusServer, unique_name: Callable[[str], str]
) -> None:
    import redis

    from pipeline.config import ToolConfig
    from pipeline.redis.budgets import RedisBudgets
    from pipeline.rules.budgets import BudgetCaps

    deployment.watcher(http_definition("w-granted", "status.a"), T0 - MIN / 2)
    deployment.grant({"status.a"}, {"status-page"}, "ops.alert", {"ops-hook"})
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    down = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    tools = {"status-page": ToolConfig(kind="http.json@v1", url=status_server.url)}
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=1000)
    clock = ManualClock(T0 + timedelta(milliseconds=500))
    deferred = 0
    group = unique_name("ticker")
    with deployment.ticker(
        clock, group, tools=tools, budgets=RedisBudgets(down), default_caps=caps
    ) as ticker:
        deadline = time.monotonic() + 60
        while deferred < 2 and time.monotonic() < deadline:
            deferred += ticker.step().deferred
            clock.advance(timedelta(seconds=1))
    assert deferred >= 2
    assert status_server.calls == 0
    assert deployment.ticks() == []


# --- the command ---------------------------------------------------------------------------


def test_vigil_ticker_refuses_to_start_on_missing_topics_with_the_fix(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from pipeline.cli.group import vigil

    prefix = unique_name("absent") + "."
    config = tmp_path / "vigil.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\ntopic_prefix = "{prefix}"\n'
    )
    result = CliRunner().invoke(vigil, ["--config", str(config), "ticker", "--no-metrics"])
    assert result.exit_code == 1
    assert "vigil topics create" in result.output
    assert prefix in result.output


# --- a group of tickers ----------------------------------------------------------------------


def test_two_tickers_split_partitions_and_survivor_takes_over_without_duplicates(
    deployment: Deployment, unique_name: Callable[[str], str]
) -> None:
    runs: dict[int, list[str]] = {0: [], 1: []}
    n = 0
    while min(len(v) for v in runs.values()) < 2:
        run_id = f"r-{n}"
        n += 1
        home = partition_for(f"run:{run_id}", PARTITIONS)
        if len(runs[home]) < 2:
            runs[home].append(run_id)
    run_ids = runs[0] + runs[1]
    for run_id in run_ids:
        deployment.watcher(polling_definition(f"w-{run_id}", run_id, "latest"), T0 - MIN / 2)
    group = unique_name("ticker")
    clock = ManualClock(T0 + timedelta(milliseconds=500))
    settings = [
        TickerSettings(
            deployment.bootstrap, deployment.topology, name, group_id=group, poll_timeout_s=0.02
        )
        for name in ("t-1", "t-2")
    ]
    first, second = (
        PollTicker(s, TickerDeps(clock=clock, metrics_registry=CollectorRegistry()))
        for s in settings
    )
    first.start()
    second.start()

    def both_step_until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            first.step()
            second.step()
            if done():
                return
        raise AssertionError("the group did not get there in time")

    def held(ticker: PollTicker) -> set[int]:
        return {partition for _, partition in ticker.app.assignment()}

    try:
        both_step_until(lambda: bool(held(first)) and bool(held(second)))
        assert sorted([held(first), held(second)], key=min) == [{0}, {1}]
        both_step_until(lambda: len(deployment.ticks()) >= 4)
        clock.set(T0 + MIN + timedelta(milliseconds=500))
        both_step_until(lambda: len(deployment.ticks()) >= 8)
        first.close()
        clock.set(T0 + 2 * MIN + timedelta(milliseconds=500))
        deadline = time.monotonic() + 60
        while len(deployment.ticks()) < 12 and time.monotonic() < deadline:
            second.step()
        for _ in range(5):
            second.step()
    finally:
        second.close()
    for run_id in run_ids:
        assert deployment.ticks_of(f"w-{run_id}") == [T0, T0 + MIN, T0 + 2 * MIN]


def test_fenced_tick_transaction_is_written_again_without_calling_the_tool_again(
    deployment: Deployment, unique_name: Callable[[str], str]
) -> None:
    """A failover between a governed call and the commit of its tick (a rival takes the
    ticker's transactional id while the tool answers): the transaction cannot commit, the
    ticker rebuilds its producer, plans the same instant again and writes it with the answer
    it holds. The tool is called once."""
    from confluent_kafka import Producer

    from pipeline.config import ToolConfig
    from pipeline.kafka.clients import producer_config

    group = unique_name("ticker")
    rivals: list[Producer] = []

    def answer() -> dict[str, str]:
        if not rivals:  # the first call: the ticker's producer is fenced meanwhile
            rival = Producer(producer_config(deployment.bootstrap, transactional_id=f"{group}-t-1"))
            rival.init_transactions(30)
            rivals.append(rival)
        return {"status": "down"}

    server = StatusServer(answer)
    deployment.watcher(http_definition("w-fenced", "status.a"), T0 - MIN / 2)
    deployment.grant({"status.a"}, {"status-page"}, "ops.alert", {"ops-hook"})
    tools = {"status-page": ToolConfig(kind="http.json@v1", url=server.url)}
    clock = ManualClock(T0 + timedelta(milliseconds=500))
    try:
        with deployment.ticker(clock, group, tools=tools) as ticker:
            settle(ticker, lambda: len(deployment.ticks()) >= 1)
    finally:
        server.close()

    assert rivals, "the tool was never called"
    assert [(t["watcher_id"], t["payload"]) for t in deployment.ticks()] == [
        ("w-fenced", '{"status":"down"}')
    ]
    assert server.calls == 1
    sample = deployment.metrics_registry.get_sample_value
    assert sample("vigil_ticker_tool_answers_reused_total") == 1
