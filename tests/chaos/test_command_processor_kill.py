"""Scenario 5: the command processor killed with SIGKILL again and again while 2,000 commands
are in flight from 10 concurrent clients. Every command is answered — a client whose answer is
late waits again, re-reading the result channel from before its command — and applied exactly
once: one result per request id, the one its client got, and every watcher ends created and
paused once (revision 2; a pause applied twice would be a second, ``stale_revision`` answer).

The processor rejoins with ``--static-membership`` so each restart takes its partitions back at
once instead of waiting out the dead member's session.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable

import pytest

from pipeline.rules.commands import CommandVerb
from tests.chaos.checker import Checker, Expectation
from tests.chaos.load import Subject, event_watcher
from tests.chaos.scenario import size, wait_for
from tests.chaos.stack import Stack
from tests.receiver import Receiver

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

COMMANDS = size(ci=2_000, full=2_000)
CLIENTS = 10
PROCESSOR = "command-processor"


def test_command_processor_killed_with_2000_commands_in_flight_applies_each_once(
    deploy: Callable[..., Stack], receiver: Receiver
) -> None:
    stack = deploy(args={PROCESSOR: ["--static-membership"]})
    stack.start_all()
    subject = Subject.fresh(stack)
    sources = [f"src.{n}" for n in range(CLIENTS)]
    with subject.client() as client:
        subject.grant(client, sources)
    failures: list[BaseException] = []
    made: list[str] = []

    def commands(n: int) -> None:
        try:
            with subject.client(timeout_s=10.0) as client:
                for i in range(COMMANDS // CLIENTS // 2):
                    watcher_id = f"c{n}-{i}"
                    body = event_watcher(watcher_id, sources[n])
                    created = subject.send(client, CommandVerb.CREATE, definition=body)
                    assert created.ok, created.error
                    made.append(watcher_id)
                    paused = subject.send(
                        client, CommandVerb.PAUSE, watcher_id=watcher_id, expected_revision=1
                    )
                    assert paused.ok, paused.error
        except BaseException as exc:  # reported below
            failures.append(exc)

    clients = [threading.Thread(target=commands, args=(n,), daemon=True) for n in range(CLIENTS)]
    for thread in clients:
        thread.start()
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "15")))
    while any(thread.is_alive() for thread in clients):
        answered = len(subject.answered)  # the restarted processor answers before it dies

        def answering(n: int = answered) -> bool:
            return len(subject.answered) > n + 100 or not any(t.is_alive() for t in clients)

        wait_for("answers from the processor", answering, 180, stack)
        time.sleep(rng.uniform(0.2, 2.0))
        stack.kill(PROCESSOR)
        time.sleep(rng.choice([0.1, 0.5, 2.0]))
        stack.start(PROCESSOR)
    for thread in clients:
        thread.join(10)
    assert not failures, failures
    assert stack.kills[PROCESSOR] >= 5, "the chaos did not happen"

    expect = Expectation(
        answered=subject.answered,
        sent=subject.sent,
        registry={subject.watcher_key(w): ("paused", 2) for w in made},
    )
    assert len(made) == COMMANDS // 2
    verdict = Checker(stack.bootstrap, stack.redis_url, stack.topology, receiver).verdict(expect)
    codes = stack.stop_all()
    assert verdict.ok, str(verdict)
    assert verdict.commands == COMMANDS + 1  # and the grant
    assert not stack.unexpected, f"exited on their own: {stack.unexpected}\n{stack.logs()}"
    assert set(codes.values()) == {0}, f"exit codes {codes}\n{stack.logs()}"
