"""No silent miss (issue 30, seed 001 story 6): a one-shot schedule due while one part of the
pipeline is down — the evaluator, delivery, or the broker itself — for longer than a schedule
fire's 5-minute ``max_age`` after its due time still reaches its chat exactly once when that
part is back, flagged late with its due time ("due at T, late by D"), and the schedule is then
closed (``list`` no longer shows it); ``vigil replay`` re-derives its late flag: 0 differences.

Every process runs on a clock twenty times faster than the wall clock
(``VIGIL_TEST_CLOCK_RATE``, test-only), so six minutes of downtime take eighteen seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from pipeline.rules.commands import CommandVerb
from pipeline.rules.commands.immediate import CONTROL_PURPOSE, schedule_source
from pipeline.rules.instants import rfc3339_seconds
from tests.chaos.load import Subject
from tests.chaos.scenario import wait_for
from tests.chaos.servers import OwnKafka
from tests.chaos.stack import CHAT, CHAT_ID, Stack
from tests.receiver import Receiver

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

RATE = 20.0
LEAD = timedelta(seconds=40)  # from creating the one-shot to its due time (2 s of wall time)
DOWN = timedelta(minutes=6, seconds=30)  # past the due time: longer than a fire's max_age


def one_shot(subject: Subject, name: str, text: str, due: datetime) -> str:
    """``vigil schedule --at DUE --name NAME -- send TEXT`` as the daemon issues it."""
    watcher_id = f"schedule:{CHAT}:{name}"
    body = {
        "watcher_id": watcher_id,
        "purpose": CONTROL_PURPOSE,
        "source": {"kind": "schedule", "at": rfc3339_seconds(due)},
        "delivery": {"target": CHAT, "verb": "send", "text": text},
    }
    with subject.client() as client:
        result = subject.send(client, CommandVerb.SCHEDULE, watcher_id=watcher_id, definition=body)
    assert result.ok, result.error
    return watcher_id


def live_schedules(subject: Subject) -> set[str]:
    with subject.client() as client:
        result = subject.send(client, CommandVerb.LIST, source_id=schedule_source(CHAT))
    assert result.ok and result.result is not None, result.error
    return {str(w["watcher_id"]) for w in result.result["watchers"]}


def texts(receiver: Receiver, prefix: str) -> list[str]:
    return [
        str(m["text"])
        for m in receiver.messages()
        if str(m.get("chat_id")) == CHAT_ID and str(m.get("text", "")).startswith(prefix)
    ]


def ready(stack: Stack, receiver: Receiver) -> Subject:
    """Every process up and the daemon's grant in place: a one-shot due now arrives."""
    stack.start_all()
    subject = Subject.fresh(stack)
    with subject.client(timeout_s=60) as client:
        subject.control_grant(client, CHAT)
    one_shot(subject, "warm-up", "warm-up", stack.now() + timedelta(seconds=5))
    wait_for("the warm-up reminder", lambda: bool(texts(receiver, "warm-up")), 180, stack)
    return subject


def pass_time(stack: Stack, until: datetime) -> None:
    """Wait (no process checks: one is down on purpose) until the stack's clock reads ``until``."""
    while stack.now() < until:
        time.sleep(0.2)


def delivered_once_late_and_closed(
    stack: Stack, receiver: Receiver, subject: Subject, watcher_id: str, due: datetime
) -> None:
    wait_for("the late reminder", lambda: bool(texts(receiver, "stretch")), 240, stack)
    [text] = texts(receiver, "stretch")
    assert f"(late: due at {rfc3339_seconds(due)}, late by " in text, text
    wait_for("the one-shot to close", lambda: watcher_id not in live_schedules(subject), 60, stack)
    time.sleep(3)  # a second copy would arrive in this window
    assert len(texts(receiver, "stretch")) == 1
    # Replay re-derives both fires, late flags included, from what was recorded.
    done = stack.vigil("replay", "--subject", f"{subject.tenant}/{subject.user}", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["replayed"], report["difference_count"]) == (2, 0), report
    codes = stack.stop_all()
    assert set(codes.values()) == {0}, f"exit codes {codes}\n{stack.logs()}"


@pytest.mark.parametrize("down", ["evaluator", "delivery"])
def test_one_shot_due_while_a_stage_is_down_past_max_age_arrives_once_late_then_closes(
    deploy: Callable[..., Stack], receiver: Receiver, down: str
) -> None:
    stack = deploy(clock_rate=RATE)
    subject = ready(stack, receiver)
    stack.kill(down)
    due = (stack.now() + LEAD).replace(microsecond=0)
    watcher_id = one_shot(subject, "stretch", "stretch", due)
    pass_time(stack, due + DOWN)
    assert texts(receiver, "stretch") == []
    if down == "evaluator":  # nothing could close it yet (with delivery down, it closed at fire)
        assert watcher_id in live_schedules(subject)
    stack.start(down)
    delivered_once_late_and_closed(stack, receiver, subject, watcher_id, due)


def test_one_shot_due_while_the_broker_is_down_past_max_age_arrives_once_late_then_closes(
    deploy: Callable[..., Stack], kafka: OwnKafka, receiver: Receiver
) -> None:
    stack = deploy(clock_rate=RATE)
    subject = ready(stack, receiver)
    due = (stack.now() + LEAD * 10).replace(microsecond=0)
    watcher_id = one_shot(subject, "stretch", "stretch", due)
    kafka.kill()  # down at once: a graceful stop on a loaded machine can outlast the lead
    assert stack.now() < due, "the one-shot's command took longer than the lead"
    pass_time(stack, due + DOWN)
    assert texts(receiver, "stretch") == []
    kafka.start()
    delivered_once_late_and_closed(stack, receiver, subject, watcher_id, due)
