"""Scenario 4: the poll ticker killed with SIGKILL every few seconds over 500 polling watchers
for five minutes of ticks. With the ``bounded`` missed-run policy no due instant may be lost and
none ticked twice, so each watcher's ticks are exactly its cron's instants from activation to
its deadline, and each becomes exactly one delivery.

Every process runs on a clock six times faster than the wall clock (``VIGIL_TEST_CLOCK_RATE``,
test-only), so five minutes of ``* * * * *`` ticks take under a minute; the ticker rejoins with
``--static-membership`` so a restart takes its partitions back at once instead of waiting out
the dead member's session.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest

from pipeline.rules.instants import parse_instant
from tests.chaos.checker import Checker, Expectation, TickPlan
from tests.chaos.load import Subject, minutes_between, poll_key, polling_watcher
from tests.chaos.scenario import size, wait_for
from tests.chaos.stack import Stack
from tests.receiver import Receiver

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

RATE = 6.0
WATCHERS = size(ci=500, full=500)
SOURCES = 50
TICK_MINUTES = 5
CLIENTS = 10
KILLS = 8  # at least, however slowly the ticker restarts


def test_ticker_killed_every_few_seconds_loses_no_tick_and_repeats_none(
    deploy: Callable[..., Stack], receiver: Receiver
) -> None:
    stack = deploy(clock_rate=RATE, args={"ticker": ["--static-membership"]})
    stack.start_all()
    subject = Subject.fresh(stack)
    sources = [f"status.{n}" for n in range(SOURCES)]
    with subject.client() as client:
        subject.grant(client, sources)
    # Each watcher expires a fixed span after its own create (so a slow setup on a busy machine
    # costs no instants and a quick one waits for nothing): at least TICK_MINUTES of instants.
    watchers = {f"p-{n}": sources[n % SOURCES] for n in range(WATCHERS)}
    expires: dict[str, datetime] = {}

    def create(names: list[str]) -> dict[str, datetime]:
        activated = {}
        with subject.client() as client:
            for name in names:
                ends = (stack.now() + timedelta(minutes=TICK_MINUTES + 2)).replace(second=30)
                body = polling_watcher(name, watchers[name], expires_at=ends)
                result = subject.create(client, body)
                assert result.result is not None
                activated[name] = parse_instant(result.result["activated_at"], "activated_at")
                expires[name] = ends
        return activated

    names = list(watchers)
    with ThreadPoolExecutor(CLIENTS) as pool:
        parts = pool.map(create, [names[i::CLIENTS] for i in range(CLIENTS)])
        activated = {k: v for part in parts for k, v in part.items()}
    slow = [n for n in names if activated[n] + timedelta(minutes=TICK_MINUTES) > expires[n]]
    assert not slow, f"activated too late for {TICK_MINUTES} minutes of ticks: {slow[:5]}"
    deadline = max(expires.values())

    rng = random.Random(int(os.environ.get("CHAOS_SEED", "15")))
    while stack.now() < deadline + timedelta(seconds=20) or stack.kills["ticker"] < KILLS:
        time.sleep(rng.uniform(2.0, 5.0))
        stack.kill("ticker")
        time.sleep(rng.choice([0.1, 0.5, 1.5]))
        stack.start("ticker")
    assert stack.kills["ticker"] >= KILLS, "the chaos did not happen"

    plans = [
        TickPlan(
            subject.watcher_key(name),
            frozenset(minutes_between(activated[name], expires[name])),
        )
        for name in names
    ]
    expect = Expectation(
        deliveries={
            poll_key(subject.tenant, subject.user, name, watchers[name], at)
            for name, plan in zip(names, plans, strict=True)
            for at in plan.instants
        },
        answered=subject.answered,
        sent=subject.sent,
        ticks=plans,
    )
    assert len(expect.deliveries) >= WATCHERS * TICK_MINUTES
    checker = Checker(stack.bootstrap, stack.redis_url, stack.topology, receiver)
    wait_for(
        "every instant delivered",
        lambda: expect.deliveries <= receiver.distinct_keys(),
        300,
        stack,
    )
    assert checker.wait_settled(expect, 120, alive=stack.check_alive)
    verdict = checker.verdict(expect)
    codes = stack.stop_all()
    assert verdict.ok, str(verdict)
    assert verdict.ticks == len(expect.deliveries)
    assert set(codes.values()) == {0}, f"exit codes {codes}\n{stack.logs()}"
