"""Scenario 1: the broker restarted twice mid-run, deliveries in flight; every vigil process
recovers by itself (none exits, none is restarted by the test) and the checker passes."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.chaos.scenario import EventRun, size
from tests.chaos.servers import OwnKafka
from tests.chaos.stack import Stack
from tests.receiver import Receiver

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

EVENTS = size(ci=20_000, full=20_000)
DOWN_S = 5.0


def test_broker_restarted_twice_mid_run_loses_nothing_and_repeats_nothing(
    deploy: Callable[..., Stack], kafka: OwnKafka, receiver: Receiver
) -> None:
    stack = deploy()
    stack.start_all()
    run = EventRun(stack, receiver, EVENTS, pause_s=0.4)
    run.start()
    for _ in range(2):
        run.progressed(by=300, timeout_s=240)  # deliveries in flight
        kafka.stop()
        time.sleep(DOWN_S)
        kafka.start()
    verdict = run.finish(settle_s=420)
    assert verdict.ok, str(verdict)
    assert verdict.expected == EVENTS // 3 + (1 if EVENTS % 3 else 0)
