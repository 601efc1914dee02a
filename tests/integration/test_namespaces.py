"""Two deployments on one broker and one Redis, with identical subjects, watcher ids and
instance ids but different ``[instance] namespace``s, never meet (DESIGN.md §10): each delivers
its own event although a watcher's delivery budget is one per window (a shared Redis key would
let only one of them through), each stage joins its own consumer group, and each budget key
carries its namespace.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from confluent_kafka.admin import AdminClient

from producers.publish.publisher import EventPublisher
from tests.chaos.load import EVENT_TYPE, Subject, event_watcher
from tests.chaos.stack import BOT_TOKEN, SECRET, Stack
from tests.names import fresh
from tests.receiver import Receiver

pytestmark = pytest.mark.integration

STAGES = ("command-processor", "evaluator", "delivery")
WATCHER = "w-1"
SOURCE = "src.1"


@pytest.fixture
def receivers() -> Iterator[tuple[Receiver, Receiver]]:
    with (
        Receiver(secret=SECRET, bot_token=BOT_TOKEN) as blue,
        Receiver(secret=SECRET, bot_token=BOT_TOKEN) as green,
    ):
        yield blue, green


def _groups(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups(request_timeout=10).result()
    return {group.group_id for group in listed.valid}


def test_two_namespaces_on_one_broker_and_redis_never_meet(
    tmp_path: Path,
    kafka_bootstrap: str,
    redis_url: str,
    receivers: tuple[Receiver, Receiver],
) -> None:
    run = fresh("ns")
    tenant = f"ns-{run}"  # the same subject in both deployments
    stacks: list[Stack] = []
    try:
        for name, receiver in zip(("blue", "green"), receivers, strict=True):
            stack = Stack(
                tmp_path / name,
                bootstrap=kafka_bootstrap,
                redis_url=redis_url,
                receiver_url=receiver.url,
                partitions=2,
                topic_prefix=f"t{run}.{name}.",
                namespace=f"{name}-{run}",
            )
            stacks.append(stack)
            stack.create_topics()
            stack.start_all(STAGES)
        for stack in stacks:
            subject = Subject(tenant, "u-1", stack.bootstrap, stack.topology, stack.clock)
            with subject.client(timeout_s=30) as client:
                subject.grant(client, [SOURCE])
                watcher = event_watcher(WATCHER, SOURCE)
                watcher["budgets"] = {"window": "1h", "deliveries": 1}
                subject.create(client, watcher)
        for stack in stacks:
            with EventPublisher(stack.bootstrap, stack.topology) as publisher:
                publisher.publish(
                    SOURCE, EVENT_TYPE, "e-1", {"status": "failed"}, datetime.now(UTC)
                )
                publisher.flush(30)

        for stack, receiver in zip(stacks, receivers, strict=True):
            try:
                receiver.wait_for(1, timeout=90)
            except TimeoutError:
                raise AssertionError(f"no delivery in {stack.root.name}\n{stack.logs()}") from None
            assert len(receiver.distinct_keys()) == 1

        deadline = time.monotonic() + 30
        expected = {f"{name}-{run}.{stage}" for name in ("blue", "green") for stage in STAGES}
        while not expected <= (found := _groups(kafka_bootstrap)):
            assert time.monotonic() < deadline, f"groups missing: {expected - found}"
            time.sleep(0.5)

        budgets = redis.Redis.from_url(redis_url)
        try:
            for name in ("blue", "green"):
                keys = {k.decode() for k in budgets.scan_iter(match=f"{name}-{run}:budget:*")}
                windows = {k for k in keys if not k.endswith(":windows")}
                # one watcher, one window, its own key; and its subject's window index
                assert len(windows) == 1, (name, keys)
                assert len(keys - windows) == 1, (name, keys)
        finally:
            budgets.close()
    finally:
        codes = {stack.root.name: stack.stop_all(timeout_s=30) for stack in stacks}
    assert all(code == 0 for found in codes.values() for code in found.values()), codes
