"""Scenario 3: Redis restarted under load, then down for 30 s under load. While it is down
nothing is evaluated or delivered (no charge, no work: DESIGN.md §3); the deferred work completes
after it returns, each attempt charged once, and the checker passes."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.chaos.scenario import EventRun, size, wait_for
from tests.chaos.servers import OwnRedis
from tests.chaos.stack import Stack
from tests.receiver import Receiver

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

EVENTS = size(ci=6_000, full=20_000)
DOWN_S = 30.0
IN_FLIGHT_S = 3.0  # sends claimed before the outage finish within this


def test_redis_restarted_then_down_30s_defers_and_never_runs_unbudgeted(
    deploy: Callable[..., Stack], redis_server: OwnRedis, receiver: Receiver
) -> None:
    stack = deploy()
    stack.start_all()
    run = EventRun(stack, receiver, EVENTS, pause_s=3.0)  # events keep coming through both
    run.start()
    run.progressed(by=300, timeout_s=240)
    redis_server.stop()
    redis_server.start()
    run.progressed(by=300, timeout_s=240)

    redis_server.stop()
    try:
        time.sleep(IN_FLIGHT_S)
        during = len(receiver.requests)
        time.sleep(DOWN_S - IN_FLIGHT_S)
        after = len(receiver.requests)
    finally:
        redis_server.start()
    assert after == during, f"{after - during} requests sent while the budget store was down"
    assert run.delivered() < EVENTS // 3, "nothing was left to defer: the outage proved nothing"
    wait_for("deliveries to resume", lambda: len(receiver.requests) > after, 120, stack)

    verdict = run.finish(settle_s=420)
    assert verdict.ok, str(verdict)
    assert verdict.received == verdict.expected == EVENTS // 3
