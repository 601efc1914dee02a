"""The delivery consumer against a real broker, Redis and a real local HTTP receiver.

Outbox entries are written directly with the outbox encoder; every test reads back what the
worker committed to ``delivery-state`` (``read_committed``) and what the receiver got.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Message

from consumers.delivery.adapters.signing import Verification
from consumers.delivery.adapters.verbs import VerbExecutor
from pipeline.clock import ManualClock
from pipeline.control.run import ScriptRunner
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.topics import DLQ_OFFSET, DLQ_PARTITION, DLQ_REASON, DLQ_TOPIC, Topic
from pipeline.records.delivery_state import DeliveryRecord
from pipeline.records.notification import decode_notification
from pipeline.records.outbox_entry import encode_outbox_entry
from pipeline.rules.backoff import backoff_wait
from pipeline.rules.budgets import BudgetCaps, window_end, window_start
from pipeline.rules.commands.host import Host
from pipeline.rules.commands.immediate import ANSWER_STEP, CONTROL_PURPOSE
from pipeline.rules.dispatch import BUDGET_UNAVAILABLE_RETRY, DeferReason
from pipeline.rules.keys import derived_delivery_key
from pipeline.rules.outcomes import DeliveryStatus, ErrorCode, SuppressReason
from pipeline.rules.quiet_hours import QuietHours, next_allowed
from tests.integration.delivery_harness import BOT_TOKEN, SECRET, Harness, poll_until, test_key
from tests.integration.runtime_helpers import header_pairs
from tests.receiver import Receiver

pytestmark = pytest.mark.integration


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(secret=SECRET, bot_token=BOT_TOKEN) as running:
        yield running


@pytest.fixture
def harness(
    kafka_bootstrap: str, redis_url: str, unique_name: Callable[[str], str], receiver: Receiver
) -> Harness:
    return Harness.create(kafka_bootstrap, redis_url, unique_name("dlv"), receiver)


def _settled(harness: Harness, keys: set[str]) -> Callable[[], dict[str, Any]]:
    def check() -> dict[str, Any]:
        latest = harness.latest()
        done = {
            k: r
            for k, r in latest.items()
            if k in keys and r is not None and r.state.settled_at is not None
        }
        return latest if len(done) == len(keys) else {}

    return check


def test_receiver_failing_three_times_gets_four_signed_attempts_with_backoff_due_times(
    harness: Harness, receiver: Receiver
) -> None:
    harness.grant("g-1")
    receiver.fail(3, 500)
    # Waits (0.3 s, 0.6 s, 1.2 s) longer than a commit interval, so every retry state is its
    # own changelog record (the runtime writes a key's latest state once per transaction).
    base, cap = timedelta(milliseconds=300), timedelta(seconds=2)
    (entry,) = harness.publish([harness.entry("e-1", retry=(8, base, cap))])
    key = entry.delivery_key
    with harness.adapters() as adapters, harness.running(harness.worker(adapters)):
        poll_until("delivered", _settled(harness, {key}))

    requests = receiver.requests
    assert len(requests) == 4
    assert {r.idempotency_key for r in requests} == {key}
    assert {r.headers["webhook-id"] for r in requests} == {key}
    assert all(r.signature is Verification.VALID for r in requests)
    history = [r for r in harness.history()[key] if r is not None]
    retries = [r.state for r in history if r.state.reason is DeferReason.BACKOFF]
    assert [s.attempt for s in retries] == [1, 2, 3]
    for state in retries:
        assert state.status is DeliveryStatus.PENDING
        assert state.last_error is ErrorCode.HTTP_5XX
        assert state.due_at - state.updated_at == backoff_wait(key, state.attempt, base, cap)
    final = history[-1].state
    assert final.status is DeliveryStatus.DELIVERED
    assert final.attempt == 4
    assert harness.metric("vigil_delivery_attempts_total", adapter="webhook") == 4
    assert harness.metric("vigil_delivery_results_total", result="http_5xx", adapter="webhook") == 3
    assert (
        harness.metric("vigil_delivery_results_total", result="delivered", adapter="webhook") == 1
    )
    assert harness.metric("vigil_delivery_retries_scheduled_total", error="http_5xx") == 3
    assert harness.metric("vigil_delivery_end_to_end_seconds_count") == 1
    assert harness.metric("vigil_delivery_in_flight") == 0


def _headers(msg: Message) -> dict[str, str]:
    """A consumed record's headers, decoded."""
    return {n: v.decode() if isinstance(v, bytes) else str(v) for n, v in header_pairs(msg)}


def _dead_letters(harness: Harness) -> dict[str, dict[str, str]]:
    """Dead-letter records by key, with their headers decoded."""
    return {(msg.key() or b"").decode(): _headers(msg) for msg in harness.read(Topic.DEAD_LETTER)}


def test_retry_ceiling_dead_letters_and_a_410_is_terminal_at_once(
    harness: Harness, receiver: Receiver
) -> None:
    harness.grant("g-1")
    receiver.fail(3, 500)
    retry = (3, timedelta(milliseconds=50), timedelta(seconds=1))
    (ceiling,) = harness.publish([harness.entry("ceiling", retry=retry)])
    with harness.adapters() as adapters, harness.running(harness.worker(adapters)):
        poll_until("dead letter", _settled(harness, {ceiling.delivery_key}))
        receiver.fail(1, 410)
        (gone,) = harness.publish([harness.entry("gone", retry=retry)])
        latest = poll_until("gone settled", _settled(harness, {gone.delivery_key}))

    first, second = latest[ceiling.delivery_key].state, latest[gone.delivery_key].state
    assert (first.status, first.attempt, first.last_error) == (
        DeliveryStatus.DEAD_LETTER,
        3,
        ErrorCode.HTTP_5XX,
    )
    assert (second.status, second.attempt, second.last_error) == (
        DeliveryStatus.DEAD_LETTER,
        1,
        ErrorCode.HTTP_410,
    )
    assert len(receiver.requests) == 4  # three for the ceiling, one for the 410
    assert harness.metric("vigil_delivery_dead_letters_total", reason="http_5xx") == 1
    assert harness.metric("vigil_delivery_dead_letters_total", reason="http_410") == 1
    letters = poll_until("dead-letter records", lambda: _dead_letters(harness) or None)
    assert letters[ceiling.delivery_key][DLQ_REASON] == "http_5xx"
    assert letters[gone.delivery_key][DLQ_REASON] == "http_410"
    assert letters[gone.delivery_key][DLQ_TOPIC] == harness.topology.name(Topic.OUTBOX)


def test_third_unique_delivery_over_a_budget_of_two_is_suppressed_with_its_reason(
    harness: Harness, receiver: Receiver
) -> None:
    clock = ManualClock(datetime.now(UTC))
    harness.grant("g-1")
    caps = BudgetCaps(window=timedelta(hours=1), deliveries=2, attempts=100)
    entries = harness.publish(
        harness.entry(f"b-{i}", budgets=caps, due_at=clock.now()) for i in range(3)
    )
    keys = {e.delivery_key for e in entries}
    with harness.adapters() as adapters, harness.running(harness.worker(adapters, clock=clock)):
        latest = poll_until("all settled", _settled(harness, keys))

    states = [latest[k] for k in keys]
    delivered = {r.key for r in states if r and r.state.status is DeliveryStatus.DELIVERED}
    suppressed = [r for r in states if r and r.state.status is DeliveryStatus.SUPPRESSED]
    assert len(delivered) == 2
    assert len(suppressed) == 1
    assert suppressed[0].state.reason is SuppressReason.BUDGET_EXHAUSTED
    assert suppressed[0].detail == "deliveries"
    assert receiver.distinct_keys() == delivered
    assert harness.metric("vigil_delivery_suppressions_total", reason="budget_exhausted") == 1


def test_attempt_ceiling_defers_a_retry_to_the_next_window(
    harness: Harness, receiver: Receiver
) -> None:
    window = timedelta(hours=1)
    clock = ManualClock(window_start(datetime.now(UTC), window) + timedelta(minutes=1))
    harness.grant("g-1")
    receiver.fail(1, 503)
    caps = BudgetCaps(window=window, deliveries=10, attempts=1)
    (entry,) = harness.publish([harness.entry("a-1", budgets=caps, due_at=clock.now())])
    key = entry.delivery_key

    def latest_state() -> DeliveryRecord | None:
        return harness.latest().get(key)

    with harness.adapters() as adapters, harness.running(harness.worker(adapters, clock=clock)):
        poll_until(
            "a retry after the first failure",
            lambda: (r := latest_state()) and r.state.reason is DeferReason.BACKOFF,
        )
        clock.advance(timedelta(seconds=5))  # the retry is due; this window's attempt is spent
        deferred = poll_until(
            "the attempt-ceiling deferral",
            lambda: (r := latest_state()) and r.state.reason is DeferReason.ATTEMPT_CEILING and r,
        )
        assert deferred.state.due_at == window_end(clock.now(), window)
        assert deferred.detail == "attempts"
        assert len(receiver.requests) == 1
        clock.set(deferred.state.due_at)  # a new window starts from zero
        final = poll_until("delivered", _settled(harness, {key}))[key]

    assert final.state.status is DeliveryStatus.DELIVERED
    assert final.state.attempt == 2
    assert len(receiver.requests) == 2


def test_authorization_is_rechecked_before_every_attempt(
    harness: Harness, receiver: Receiver
) -> None:
    harness.grant("g-1")
    receiver.fail(1, 500)
    retry = (8, timedelta(seconds=3), timedelta(seconds=6))  # the revocation lands first
    (revoked,) = harness.publish([harness.entry("revoked", retry=retry)])
    (never,) = harness.publish([harness.entry("never", user="u-without-grant")])
    keys = {revoked.delivery_key, never.delivery_key}
    with harness.adapters() as adapters, harness.running(harness.worker(adapters)):
        poll_until("the first attempt", lambda: receiver.requests)
        harness.revoke("g-1")
        latest = poll_until("both settled", _settled(harness, keys))

    for key, detail in ((revoked.delivery_key, "no_grant"), (never.delivery_key, "no_grant")):
        record = latest[key]
        assert record.state.status is DeliveryStatus.SUPPRESSED
        assert record.state.reason is SuppressReason.AUTHORIZATION_DENIED
        assert record.detail == detail
    assert receiver.distinct_keys() == {revoked.delivery_key}
    assert len(receiver.requests) == 1
    earlier = [r.state.reason for r in harness.history()[revoked.delivery_key] if r]
    assert DeferReason.BACKOFF in earlier  # it failed once, then authorization was rechecked


def test_unreachable_redis_defers_and_never_sends_unbudgeted(
    harness: Harness, receiver: Receiver
) -> None:
    harness.grant("g-1")
    (entry,) = harness.publish([harness.entry("no-redis")])
    harness.redis_url = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    with harness.adapters() as adapters, harness.running(harness.worker(adapters)):
        record = poll_until(
            "a budget deferral",
            lambda: (
                (r := harness.latest().get(entry.delivery_key))
                and r.state.reason is DeferReason.BUDGET_UNAVAILABLE
                and r
            ),
        )
    assert record.state.status is DeliveryStatus.PENDING
    assert record.state.due_at - record.state.updated_at == BUDGET_UNAVAILABLE_RETRY
    assert receiver.requests == []


def test_quiet_hours_defer_to_the_next_allowed_instant(
    harness: Harness, receiver: Receiver
) -> None:
    now = datetime.now(UTC)
    minute = now.hour * 60 + now.minute
    quiet = QuietHours(
        start=f"{(minute - 10) % 1440 // 60:02d}:{(minute - 10) % 60:02d}",
        end=f"{(minute + 60) % 1440 // 60:02d}:{(minute + 60) % 60:02d}",
        timezone="UTC",
    )
    harness.grant("g-1")
    (entry,) = harness.publish([harness.entry("quiet", quiet_hours=quiet)])
    with harness.adapters() as adapters, harness.running(harness.worker(adapters)):
        record = poll_until(
            "a quiet-hours deferral",
            lambda: (
                (r := harness.latest().get(entry.delivery_key))
                and r.state.reason is DeferReason.QUIET_HOURS
                and r
            ),
        )
    expected = QuietHours.parse(quiet.start, quiet.end, quiet.timezone)
    assert record.state.due_at == next_allowed(expected, record.state.updated_at)
    assert record.state.due_at > record.state.updated_at
    assert receiver.requests == []


def test_cancelled_watcher_drops_undelivered_entries_and_purges_them(
    harness: Harness, receiver: Receiver
) -> None:
    harness.grant("g-1")
    later = datetime.now(UTC) + timedelta(hours=1)
    (entry,) = harness.publish([harness.entry("cancel-me", watcher="w-9", due_at=later)])
    key = entry.delivery_key
    with harness.adapters() as adapters, harness.running(harness.worker(adapters)):
        poll_until("pending", lambda: harness.latest().get(key))
        harness.cancel_watcher("acme", "u-1", "w-9")
        poll_until("purged", lambda: key in harness.latest() and harness.latest()[key] is None)
        outbox = poll_until(
            "outbox tombstone",
            lambda: [m for m in harness.read(Topic.OUTBOX) if m.key() == key.encode()][1:],
        )

    statuses = [r.state.status if r else None for r in harness.history()[key]]
    assert DeliveryStatus.CANCELLED in statuses
    assert statuses[-1] is None
    assert outbox[-1].value() is None
    assert receiver.requests == []


def test_in_app_delivery_writes_its_ledger_record_then_the_wake(
    harness: Harness, receiver: Receiver
) -> None:
    harness.grant("g-1")
    (entry,) = harness.publish([harness.entry("inbox", target="inbox", wake_session=True)])
    with harness.adapters() as adapters, harness.running(harness.worker(adapters)):
        poll_until("delivered", _settled(harness, {entry.delivery_key}))
        ledger = poll_until(
            "ledger and wake",
            lambda: harness.read(Topic.NOTIFICATIONS)[1:] and harness.read(Topic.NOTIFICATIONS),
        )

    values = [decode_notification(harness.codec, harness.ring, m.value()) for m in ledger]
    assert [v["kind"] for v in values] == ["notification", "wake"]
    assert {v["delivery_key"] for v in values} == {entry.delivery_key}
    assert values[0]["trigger"] == entry.trigger and not values[0]["erased"]
    assert b"build.finished" not in ledger[0].value(), "the ledger's trigger is sealed"
    assert values[1]["text"] is None and values[1]["trigger"] is None  # the wake is content-free
    assert receiver.requests == []
    assert harness.metric("vigil_delivery_results_total", result="delivered", adapter="in_app") == 1


def test_erased_subject_loses_pending_and_delivered_entries_and_its_budgets(
    harness: Harness, receiver: Receiver
) -> None:
    harness.grant("g-1")
    (sent,) = harness.publish([harness.entry("sent")])
    later = datetime.now(UTC) + timedelta(hours=1)
    (waiting,) = harness.publish([harness.entry("waiting", due_at=later)])
    (other,) = harness.publish([harness.entry("other", user="u-2", due_at=later)])
    keys = {sent.delivery_key, waiting.delivery_key}
    prefix = harness.budgets().subject_prefix("acme", "u-1")
    counters = redis.Redis.from_url(harness.redis_url)

    def budget_keys() -> list[bytes]:
        return list(counters.scan_iter(match=prefix + "*"))

    with harness.adapters() as adapters, harness.running(harness.worker(adapters)):
        poll_until("delivered", _settled(harness, {sent.delivery_key}))
        assert budget_keys()
        harness.erase_subject("acme", "u-1")
        poll_until(
            "both purged",
            lambda: (latest := harness.latest()) and all(latest.get(k, 1) is None for k in keys),
        )
        assert not budget_keys()

    history = harness.history()
    assert DeliveryStatus.CANCELLED in [r.state.status for r in history[waiting.delivery_key] if r]
    assert history[other.delivery_key][-1] is not None  # another subject keeps its entry
    tombstoned = {(m.key() or b"").decode() for m in harness.read(Topic.OUTBOX) if not m.value()}
    assert tombstoned == keys


def test_settled_entries_are_purged_once_their_retention_has_passed(
    harness: Harness, receiver: Receiver
) -> None:
    harness.grant("g-1")
    (entry,) = harness.publish([harness.entry("short", retention=timedelta(seconds=1))])
    key = entry.delivery_key
    with harness.adapters() as adapters, harness.running(harness.worker(adapters)):
        poll_until("purged", lambda: (h := harness.history().get(key)) and h[-1] is None)

    history = harness.history()[key]
    delivered = history[-2]
    assert delivered is not None and delivered.state.status is DeliveryStatus.DELIVERED
    assert delivered.state.settled_at is not None
    outbox = [m for m in harness.read(Topic.OUTBOX) if m.key() == key.encode()]
    assert outbox[-1].value() is None
    assert harness.metric("vigil_delivery_purges_total") == 1


def test_restart_turns_an_interrupted_claim_back_to_pending_and_sends_again(
    harness: Harness, receiver: Receiver
) -> None:
    harness.grant("g-1")
    receiver.stall(10)  # the first attempt hangs: the worker dies with it in flight
    (entry,) = harness.publish([harness.entry("restart")])
    key = entry.delivery_key
    with harness.adapters() as adapters:
        crashed = harness.worker(adapters)
        crashed.start()

        def first_attempt() -> list[Any]:
            crashed.step()
            return receiver.requests

        poll_until("the first attempt", first_attempt)
        crashed.app.close(commit=False)  # gone without recording: the claim stays dispatching
        crashed.close()
        with harness.running(harness.worker(adapters)):
            poll_until("delivered", _settled(harness, {key}))

    states = [(r.state.status, r.state.attempt) for r in harness.history()[key] if r]
    assert states[0] == (DeliveryStatus.DISPATCHING, 1)
    assert states[-1] == (DeliveryStatus.DELIVERED, 2)
    assert [r.idempotency_key for r in receiver.requests] == [key, key]


def test_zombie_worker_cannot_record_after_its_partitions_moved(
    harness: Harness, receiver: Receiver
) -> None:
    """KIP-447: a worker that lost its partitions without noticing (no poll) still holds its
    old group generation; its next transaction carries it and cannot commit."""
    harness.grant("g-1")
    receiver.stall(12)  # the zombie's attempt hangs while its partitions move
    (entry,) = harness.publish([harness.entry("zombie")])
    key = entry.delivery_key
    with harness.adapters() as adapters:
        zombie = harness.worker(
            adapters, instance="zombie", consumer_overrides={"max.poll.interval.ms": 7000}
        )
        zombie.start()

        def claimed() -> list[Any]:
            zombie.step()
            return receiver.requests

        poll_until("the zombie's attempt", claimed)
        # The zombie stops polling: the group gives its partitions to the survivor.
        with harness.running(harness.worker(adapters, instance="survivor")):
            poll_until("the survivor delivered", _settled(harness, {key}))

            def answered() -> bool:
                zombie._sends.collect()
                return zombie._sends.ready(stopping=True)

            poll_until("the zombie's answer", answered, timeout=30)
            assert zombie._record_answers()  # into its stale store, unaware
            assert not zombie.app.transaction().commit()  # fenced by the group generation
        zombie.close()

    states = [(r.state.status, r.state.attempt) for r in harness.history()[key] if r]
    assert (DeliveryStatus.DELIVERED, 1) not in states
    assert states[-1] == (DeliveryStatus.DELIVERED, 2)
    assert [r.idempotency_key for r in receiver.requests] == [key, key]


def test_zombie_that_read_no_outbox_record_is_still_fenced(
    harness: Harness, receiver: Receiver
) -> None:
    """A worker whose input delivered nothing since assignment (a retry after a restart) has
    no consumer position to send; it sends its committed offsets instead, so its transactions
    still carry the group generation."""
    harness.grant("g-1")
    receiver.fail(1, 500)
    retry = (8, timedelta(seconds=2), timedelta(seconds=4))
    (entry,) = harness.publish([harness.entry("quiet-zombie", retry=retry)])
    key = entry.delivery_key
    with harness.adapters() as adapters:
        with harness.running(harness.worker(adapters, instance="first")):
            poll_until("the first attempt failed", lambda: receiver.requests)
        receiver.stall(12)  # the zombie's retry hangs while its partitions move
        zombie = harness.worker(
            adapters, instance="zombie", consumer_overrides={"max.poll.interval.ms": 7000}
        )
        zombie.start()

        def claimed() -> bool:
            zombie.step()
            return len(receiver.requests) >= 2

        poll_until("the zombie's retry", claimed)
        with harness.running(harness.worker(adapters, instance="survivor")):
            poll_until("the survivor delivered", _settled(harness, {key}))

            def answered() -> bool:
                zombie._sends.collect()
                return zombie._sends.ready(stopping=True)

            poll_until("the zombie's answer", answered, timeout=30)
            assert zombie._record_answers()
            assert not zombie.app.transaction().commit()
        zombie.close()

    states = [(r.state.status, r.state.attempt) for r in harness.history()[key] if r]
    assert (DeliveryStatus.DELIVERED, 2) not in states
    assert states[-1] == (DeliveryStatus.DELIVERED, 3)


def test_chat_send_is_counted_as_a_repeat_risk(harness: Harness, receiver: Receiver) -> None:
    harness.grant("g-1")
    (entry,) = harness.publish([harness.entry("chat", target="me")])
    with harness.adapters() as adapters, harness.running(harness.worker(adapters)):
        poll_until("delivered", _settled(harness, {entry.delivery_key}))

    assert [str(m["chat_id"]) for m in receiver.messages()] == ["42"]
    assert harness.metric("vigil_delivery_repeat_risk_sends_total", adapter="chat") == 1
    assert harness.metric("vigil_delivery_results_total", result="delivered", adapter="chat") == 1


def test_two_workers_share_the_partitions_and_deliver_every_key(
    kafka_bootstrap: str, redis_url: str, unique_name: Callable[[str], str], receiver: Receiver
) -> None:
    harness = Harness.create(kafka_bootstrap, redis_url, unique_name("dlv2"), receiver, 4)
    harness.grant("g-1")
    entries = harness.publish(harness.entry(f"s-{i}") for i in range(200))
    keys = {e.delivery_key for e in entries}
    with harness.adapters() as adapters:
        first, second = (harness.worker(adapters, instance=i) for i in ("one", "two"))
        with harness.running(first), harness.running(second):
            poll_until("both assigned", lambda: first.app.assignment() and second.app.assignment())
            poll_until("all delivered", _settled(harness, keys), timeout=60)
            owned = [{p for _, p in w.app.assignment()} for w in (first, second)]

    assert owned[0] | owned[1] == {0, 1, 2, 3}
    assert not owned[0] & owned[1]
    assert receiver.distinct_keys() == keys
    latest = harness.latest()
    statuses = {None if r is None else r.state.status for r in (latest[k] for k in keys)}
    assert statuses == {DeliveryStatus.DELIVERED}


HOST = Host.of("acme", "u-1", ["me"])  # the daemon's subject and chat, as delivery knows them


class _Agent:
    """The agent a fired prompt asks (a real, tiny one: it answers at once)."""

    def ask(self, text: str, chat: str) -> str:
        return f"answer to {text!r} in {chat}"


def test_fired_prompt_runs_once_and_its_answer_is_delivered_as_a_send(
    harness: Harness, receiver: Receiver, tmp_path: Path
) -> None:
    harness.grant("g-1", purpose=CONTROL_PURPOSE)
    outbox = harness.topology.name(Topic.OUTBOX)
    executor = VerbExecutor(
        _Agent(),
        ScriptRunner(tmp_path, tmp_path / "sock"),
        outbox,
        sealer=harness.worker_ring,
        host=HOST,
    )
    (entry,) = harness.publish(
        [
            harness.entry(
                "prompt", verb="prompt", text="status?", target="me", purpose=CONTROL_PURPOSE
            )
        ]
    )
    keys = {entry.delivery_key, derived_delivery_key(entry.delivery_key, ANSWER_STEP)}
    with (
        harness.adapters() as adapters,
        harness.running(harness.worker(adapters, executor=executor)),
    ):
        latest = poll_until("the prompt and its answer delivered", _settled(harness, keys))

    assert {latest[k].state.status for k in keys} == {DeliveryStatus.DELIVERED}
    assert [m["text"] for m in receiver.messages()] == ["answer to 'status?' in me"]
    assert harness.metric("vigil_delivery_results_total", result="delivered", adapter="prompt") == 1
    assert harness.metric("vigil_delivery_results_total", result="delivered", adapter="chat") == 1


def test_another_subjects_run_and_prompt_entries_are_dead_lettered_and_never_executed(
    harness: Harness, receiver: Receiver, tmp_path: Path
) -> None:
    """DESIGN.md §10: forged ``run``/``prompt`` entries of another tenant (granted to deliver to
    the chat, under the control purpose) reach the real delivery worker, which asks the host's
    rule again: dead-lettered, and neither the script nor the agent runs."""
    marker = tmp_path / "ran.txt"
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o700)

    class Marking:
        def ask(self, text: str, chat: str) -> str:
            marker.touch()
            return "answer"

    runner = ScriptRunner(tmp_path, tmp_path / "sock")
    executor = VerbExecutor(
        Marking(),
        runner,
        harness.topology.name(Topic.OUTBOX),
        sealer=harness.worker_ring,
        host=HOST,
    )
    harness.grant("g-evil", tenant="evil", user="x", purpose=CONTROL_PURPOSE)
    forged = harness.publish(
        [
            harness.entry("evil-run", tenant="evil", user="x", verb="run", args=("job.sh",),
                          target="me", purpose=CONTROL_PURPOSE),
            harness.entry("evil-prompt", tenant="evil", user="x", verb="prompt", text="hi",
                          target="me", purpose=CONTROL_PURPOSE),
        ]
    )  # fmt: skip
    keys = {entry.delivery_key for entry in forged}
    with (
        harness.adapters() as adapters,
        harness.running(harness.worker(adapters, executor=executor)),
    ):
        latest = poll_until("both dead-lettered", _settled(harness, keys))
    runner.wait_all(5)
    assert {latest[k].state.status for k in keys} == {DeliveryStatus.DEAD_LETTER}
    assert not marker.exists() and receiver.messages() == []


def test_hostile_redelivery_requests_are_dead_lettered_or_ignored_and_good_ones_flow(
    harness: Harness, receiver: Receiver
) -> None:
    """Forged bytes, records of the wrong type, mis-keyed and out-of-bounds requests on
    ``redeliveries`` go through the real worker: each dead-lettered once with its reason; a
    well-formed request of another subject, or for a key this worker does not hold, is ignored
    and counted (DESIGN.md §9); nothing pauses, and the good request and new entries flow."""
    harness.grant("g-1")
    receiver.fail(1, 410)
    (gone,) = harness.publish([harness.entry("gone")])
    key, absent = gone.delivery_key, test_key(f"{harness.name}:absent")
    now = datetime.now(UTC)

    def request(**overrides: Any) -> bytes:
        value = {
            "delivery_key": key,
            "tenant_id": gone.tenant_id,
            "user_id": gone.user_id,
            "request_id": "r-1",
            "requested_at": now,
            **overrides,
        }
        return bytes(harness.codec.encode("redelivery", value))

    good = request()
    outbox_value = encode_outbox_entry(harness.codec, harness.ring, gone)
    hostile: list[tuple[str, bytes | None, str]] = [  # record key, value, reason fragment
        *((key, b"\xc3\x01" + os.urandom(8 + n), "registered by no writer") for n in range(5)),
        *((key, b"\x00" + os.urandom(20), "single-object") for _ in range(5)),
        *((key, good[: 10 + n], "undecodable") for n in range(5)),
        (key, good + b"\x00\x00", "trailing bytes"),
        (key, outbox_value, "expected a redelivery record"),
        (key, None, "has no value"),
        (absent, good, "not the request's delivery key"),
        ("x" * 300, request(delivery_key="x" * 300), "64 lowercase hex"),
        (key, request(request_id="r" * 10_000), "longer than 128"),
        (key, request(tenant_id="t" * 100_000), "longer than 256"),
        (key, request(requested_at=datetime(1, 1, 1, tzinfo=UTC)), "outside the years"),
    ]
    ignored = [(key, request(tenant_id="other")), (absent, request(delivery_key=absent))]
    topic = harness.topology.name(Topic.REDELIVERIES)
    partitions = harness.topology.partitions_for(Topic.REDELIVERIES)
    expected: dict[tuple[int, int], str] = {}  # (partition, offset) → reason fragment
    offsets: Counter[int] = Counter()  # a fresh topic: offsets from 0

    def produce(record_key: str, value: bytes | None) -> int:
        partition = partition_for(record_key, partitions)
        harness.produce(Topic.REDELIVERIES, record_key, value)
        offsets[partition] += 1
        return partition

    with harness.adapters() as adapters, harness.running(harness.worker(adapters)) as worker:
        poll_until("the dead letter", _settled(harness, {key}))
        for record_key, value, why in hostile:
            partition = produce(record_key, value)
            expected[(partition, offsets[partition] - 1)] = why
        for record_key, value in ignored:
            produce(record_key, value)
        produce(key, good)
        harness.flush()
        (fresh,) = harness.publish([harness.entry("fresh")])

        def delivered() -> bool:
            latest = harness.latest()
            states = [latest.get(k) for k in (key, fresh.delivery_key)]
            return all(r is not None and r.state.status is DeliveryStatus.DELIVERED for r in states)

        poll_until("the redelivery and the fresh entry delivered", delivered, 60)
        poll_until(
            "every request read",
            lambda: (
                harness.metric(
                    "vigil_runtime_records_consumed_total", group=worker.app.group_id, topic=topic
                )
                >= sum(offsets.values())
            ),
        )
        paused = worker.app.paused

    letters: list[tuple[int, int, str]] = []
    for msg in harness.read(Topic.DEAD_LETTER):
        headers = _headers(msg)
        if headers[DLQ_TOPIC] == topic:
            origin = int(headers[DLQ_PARTITION]), int(headers[DLQ_OFFSET])
            letters.append((*origin, headers[DLQ_REASON]))
    reasons = {(partition, offset): reason for partition, offset, reason in letters}
    assert len(reasons) == len(letters), "a request was dead-lettered twice"
    assert reasons.keys() == expected.keys()
    for origin, why in expected.items():
        assert why in reasons[origin], (origin, why, reasons[origin])
    assert paused == frozenset()
    assert harness.metric("vigil_delivery_redeliveries_total", result="ignored") == 2
    assert harness.metric("vigil_delivery_redeliveries_total", result="applied") == 1
    final = harness.latest()[key]
    assert final is not None and final.state.attempt == 1  # fresh attempts, same key


def test_outbox_entry_under_another_key_is_dead_lettered_and_never_sent(
    harness: Harness, receiver: Receiver
) -> None:
    """An outbox record whose key is not its entry's delivery key (a foreign or forged record:
    it would dodge that key's dedupe) is dead-lettered with its reason; the good one flows."""
    harness.grant("g-1")
    forged, good = harness.entry("forged"), harness.entry("good")
    wrong_key = test_key(f"{harness.name}:elsewhere")
    harness.produce(
        Topic.OUTBOX, wrong_key, encode_outbox_entry(harness.codec, harness.ring, forged)
    )
    harness.flush()
    harness.publish([good])
    with harness.adapters() as adapters, harness.running(harness.worker(adapters)):
        poll_until("the good entry settled", _settled(harness, {good.delivery_key}))
        outbox = harness.topology.name(Topic.OUTBOX)
        letters = poll_until(
            "the forged record dead-lettered",
            lambda: [
                h
                for h in (_headers(m) for m in harness.read(Topic.DEAD_LETTER))
                if h[DLQ_TOPIC] == outbox
            ],
        )
    (letter,) = letters
    assert "not the entry's delivery key" in letter[DLQ_REASON]
    latest = harness.latest()
    assert forged.delivery_key not in latest and wrong_key not in latest
    assert latest[good.delivery_key] is not None
    assert len(receiver.requests) == 1
