"""A failover sends nothing again that the delivery worker knows (issue 28).

The worker's transactional producer is fenced by a rival with its transactional id (what a
coordinator move or a broker loss ends in: a new producer, the tables restored), or the worker
is asked to resync, while its sends are in flight or after their answers came back and before
they committed. Each delivery key must reach the receiver once and end ``delivered`` on its
first attempt: the held answers are recorded on the restored claims instead of being sent again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from consumers.delivery.loop import DeliveryWorker
from pipeline.kafka.clients import producer_config
from pipeline.rules.outcomes import DeliveryStatus
from tests.integration.delivery_harness import SECRET, Harness, poll_until
from tests.receiver import Receiver

pytestmark = pytest.mark.integration

ENTRIES = 6
STALL_S = 1.5  # answers wait this long (the hook's timeout is 2 s): the failover lands meanwhile


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(secret=SECRET) as running:
        yield running


@pytest.fixture
def harness(
    kafka_bootstrap: str, redis_url: str, unique_name: Callable[[str], str], receiver: Receiver
) -> Harness:
    return Harness.create(kafka_bootstrap, redis_url, unique_name("dlvf"), receiver)


def _delivered(harness: Harness, keys: set[str]) -> Callable[[], dict[str, Any]]:
    def check() -> dict[str, Any]:
        latest = {k: r for k, r in harness.latest().items() if k in keys and r is not None}
        done = [r for r in latest.values() if r.state.status is DeliveryStatus.DELIVERED]
        return latest if len(done) == len(keys) else {}

    return check


def _publish(harness: Harness, label: str) -> set[str]:
    entries = harness.publish(harness.entry(f"{label}-{i}") for i in range(ENTRIES))
    return {entry.delivery_key for entry in entries}


def _sent_all(receiver: Receiver, count: int) -> Callable[[], bool]:
    return lambda: len(receiver.requests) >= count


def _fence(harness: Harness, worker: DeliveryWorker) -> None:
    """A rival producer takes the worker's transactional id: the worker's is fenced."""
    settings = worker.settings
    rival = Producer(
        producer_config(
            harness.bootstrap, transactional_id=f"{settings.group_id}-{settings.instance_id}"
        )
    )
    rival.init_transactions(30)


def _assert_each_sent_once_and_delivered_first_time(
    harness: Harness, receiver: Receiver, keys: set[str]
) -> None:
    sent = Counter(r.idempotency_key for r in receiver.requests)
    assert sent == dict.fromkeys(keys, 1), f"re-sent: {[k for k, n in sent.items() if n > 1]}"
    latest = harness.latest()
    states = {(r.state.status, r.state.attempt) for k in keys if (r := latest[k]) is not None}
    assert states == {(DeliveryStatus.DELIVERED, 1)}


def test_fenced_worker_records_the_answers_it_holds_instead_of_sending_again(
    harness: Harness, receiver: Receiver
) -> None:
    """The answers come back after the fence: the transaction recording them cannot commit,
    the worker gets a new producer and restored tables, and records the answers it holds."""
    harness.grant("g-1")
    receiver.stall(STALL_S, times=ENTRIES)
    keys = _publish(harness, "f")
    with harness.adapters() as adapters:
        worker = harness.worker(adapters)
        with harness.running(worker):
            poll_until("every claim sent", _sent_all(receiver, ENTRIES))
            fenced = worker.app._member._producer
            _fence(harness, worker)
            poll_until("delivered", _delivered(harness, keys), timeout=60)
            assert worker.app._member._producer is not fenced, "the fence never hit"
            assert worker.in_flight == 0

    _assert_each_sent_once_and_delivered_first_time(harness, receiver, keys)


def test_resync_with_sends_in_flight_records_their_answers_on_the_restored_claims(
    harness: Harness, receiver: Receiver
) -> None:
    """A resync (what a leader-epoch fence or an unknown commit outcome asks for) restores the
    tables while the destinations are still answering: the claims in flight are not sent
    again, their answers are recorded on the restored ``dispatching`` records."""
    harness.grant("g-1")
    receiver.stall(STALL_S, times=ENTRIES)
    keys = _publish(harness, "r")
    resyncs = "vigil_runtime_resyncs_total"
    group = f"{harness.name}.delivery"
    with harness.adapters() as adapters:
        worker = harness.worker(adapters)
        with harness.running(worker):
            poll_until("every claim sent", _sent_all(receiver, ENTRIES))
            worker.app.request_resync("test: resync with sends in flight")
            poll_until("resynced", lambda: harness.metric(resyncs, group=group) >= 1)
            poll_until("delivered", _delivered(harness, keys), timeout=60)

    _assert_each_sent_once_and_delivered_first_time(harness, receiver, keys)
