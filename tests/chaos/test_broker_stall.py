"""Scenario 2: the broker stalled (SIGSTOP) for 30 s mid-run, then resumed (SIGCONT). Open
transactions outlive their timeout and group sessions expire while it sleeps; every process
survives (transaction timeouts, fenced producers and lost partitions handled) and the checker
passes."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.chaos.scenario import EventRun, size
from tests.chaos.servers import OwnKafka
from tests.chaos.stack import Stack
from tests.receiver import Receiver

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

EVENTS = size(ci=6_000, full=20_000)
STALL_S = 30.0


def test_broker_stalled_30s_mid_run_every_process_survives(
    deploy: Callable[..., Stack], kafka: OwnKafka, receiver: Receiver
) -> None:
    stack = deploy()
    stack.start_all()
    run = EventRun(stack, receiver, EVENTS, pause_s=1.0)
    run.start()
    run.progressed(by=300, timeout_s=240)  # deliveries in flight
    kafka.stall()
    try:
        time.sleep(STALL_S)
    finally:
        kafka.resume()
    run.progressed(by=300, timeout_s=240)
    verdict = run.finish(settle_s=420)
    assert verdict.ok, str(verdict)
    assert verdict.received == verdict.expected == EVENTS // 3
