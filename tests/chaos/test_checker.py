"""The checker itself, against records that break each property on purpose: it must name every
violation (a checker that always passes would make every fault scenario pass too).

Runs on the shared broker and Redis (nothing is restarted here), in topics and a budget key
prefix of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import httpx
import pytest
import redis

from pipeline.kafka.topics import Topic
from pipeline.records.command_result import encode_result
from pipeline.records.delivery_state import encode_record, first_record
from pipeline.rules.commands import CommandResult
from tests.chaos.checker import Checker, Expectation, TickPlan
from tests.integration.delivery_harness import Harness
from tests.keyring import ring_with
from tests.receiver import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def test_every_broken_property_is_named(
    kafka_bootstrap: str,
    redis_url: str,
    unique_name: Callable[[str], str],
    receiver: Receiver,
) -> None:
    harness = Harness.create(kafka_bootstrap, redis_url, unique_name("checker"), receiver)
    twice, once, stray, lost = (harness.entry(x) for x in ("twice", "once", "stray", "lost"))
    harness.publish([twice, twice, once, stray])  # `lost` never reaches the outbox
    now = datetime.now(UTC)
    for offset, entry in enumerate((twice, once)):  # pending: attempt 0, never delivered
        value = encode_record(harness.codec, first_record(entry, offset, now))
        harness.produce(Topic.DELIVERY_STATE, entry.delivery_key, value)
    answer = CommandResult(request_id="r-1", verb="show", ok=True, processed_at=now)
    answered = encode_result(harness.codec, ring_with(), answer, None)  # nothing to seal
    for _ in range(2):
        harness.produce(Topic.COMMAND_RESULTS, "r-1", answered)
    harness.flush()
    for key in (once.delivery_key, "f" * 64):  # sent with no claim; and a key nobody expected
        httpx.post(receiver.hook_url, content=b"{}", headers={"Idempotency-Key": key})
    prefix = f"chk-{uuid.uuid4().hex[:8]}:"
    store = redis.Redis.from_url(redis_url)
    try:
        window = f"{prefix}w-1"
        store.hset(window, mapping={f"t:attempt:{once.delivery_key}:1": '["ok",""]'})
        store.hset(window, mapping={"c:attempts": 2, "c:deliveries": 1})
        checker = Checker(
            kafka_bootstrap, redis_url, harness.topology, receiver, budget_prefix=prefix
        )
        verdict = checker.verdict(
            Expectation(
                deliveries={twice.delivery_key, once.delivery_key, lost.delivery_key},
                answered={"r-1": answer},
                sent={"r-1", "r-2"},
                ticks=[TickPlan('["t","u","w"]', frozenset({now.replace(microsecond=0)}))],
            )
        )
    finally:
        store.delete(window)
        store.close()
    text = "\n".join(verdict.problems)
    assert (verdict.lost, verdict.duplicates, verdict.unexpected) == (1, 1, 1), text
    for named in (
        "missing from the outbox",
        "more than once",
        "outbox keys nobody expected",
        "received keys nobody expected",
        "expected keys never received",
        "not settled",
        "sent more often than their state's attempts",
        "attempts counter 2 but 1 charged tokens",
        "charged attempts differ from their state's",
        "commands never answered",
        "commands answered more than once",
        "answers that command-results does not hold",
        "poll instants never ticked",
    ):
        assert named in text, f"{named!r} not among:\n{text}"
    assert not verdict.ok
