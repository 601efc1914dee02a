"""What the event scenarios share: one subject with a grant and event watchers made through the
command processor, a feeder thread publishing a known run of events, the waits between faults,
and the end (wait until settled, judge, stop every process cleanly).

``VIGIL_CHAOS_FULL=1`` runs the sizes the issue names where CI runs smaller ones
(:func:`size`). Left out: the faults themselves (each scenario's test module).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.chaos.checker import Checker, Expectation, Verdict
from tests.chaos.load import EventLoad, Subject, event_watcher
from tests.chaos.stack import Stack
from tests.receiver import Receiver

__all__ = ["EventRun", "size", "wait_for"]


def size(ci: int, full: int) -> int:
    """``full`` when ``VIGIL_CHAOS_FULL`` is set, else ``ci``."""
    return full if os.environ.get("VIGIL_CHAOS_FULL") else ci


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, stack: Stack) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` (with the logs) after ``timeout_s``,
    or as soon as a process exits on its own."""
    deadline = time.monotonic() + timeout_s
    while not check():
        stack.check_alive()
        if stack.unexpected:
            raise AssertionError(f"processes exited {stack.unexpected}\n{stack.logs()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{stack.logs()}")
        time.sleep(0.2)


@dataclass
class EventRun:
    """``total`` events over ``watchers`` event watchers of one fresh subject, fed by a thread."""

    stack: Stack
    receiver: Receiver
    total: int
    watchers: int = 40
    pause_s: float = 0.5
    batch: int = 250
    subject: Subject = field(init=False)
    load: EventLoad = field(init=False)
    _feeder: threading.Thread | None = field(default=None, init=False)
    _error: list[BaseException] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        stack = self.stack
        self.subject = Subject.fresh(stack)
        sources = {f"w-{n}": f"src.{n}" for n in range(self.watchers)}
        with self.subject.client() as client:
            self.subject.grant(client, sources.values())
            for watcher_id, source in sources.items():
                self.subject.create(client, event_watcher(watcher_id, source))
        self.load = EventLoad(stack.bootstrap, stack.topology, self.subject, sources)

    def start(self) -> None:
        def feed() -> None:
            try:
                self.load.publish(0, self.total, pause_s=self.pause_s, batch=self.batch)
            except BaseException as exc:  # surfaced by finish()
                self._error.append(exc)

        self._feeder = threading.Thread(target=feed, name="feeder", daemon=True)
        self._feeder.start()

    def delivered(self) -> int:
        return len(self.receiver.distinct_keys())

    def progressed(self, by: int, timeout_s: float) -> None:
        """Wait until ``by`` more keys reach the receiver (deliveries are in flight)."""
        target = self.delivered() + by
        try:
            wait_for(
                f"{by} more deliveries", lambda: self.delivered() >= target, timeout_s, self.stack
            )
        except AssertionError as exc:
            load = self.load
            feeder = (
                f"published {load.published} of {self.total}; failed flushes: {len(load.failures)}"
            )
            raise AssertionError(
                f"{exc}\n--- feeder ---\n{feeder}\n" + "\n".join(load.failures[-5:])
            ) from None

    def expectation(self) -> Expectation:
        return Expectation(
            deliveries=self.load.expected(0, self.total),
            answered=self.subject.answered,
            sent=self.subject.sent,
        )

    def finish(self, settle_s: float) -> Verdict:
        """Wait for the feeder and for every delivery; judge; stop every process (each must
        exit 0, and none may have exited before)."""
        assert self._feeder is not None
        self._feeder.join(settle_s)
        assert not self._feeder.is_alive(), "the feeder did not finish"
        assert not self._error, self._error
        expect = self.expectation()
        checker = Checker(
            self.stack.bootstrap, self.stack.redis_url, self.stack.topology, self.receiver
        )
        settled = checker.wait_settled(expect, settle_s, alive=self.stack.check_alive)
        self.stack.check_alive()
        assert not self.stack.unexpected, (
            f"processes exited on their own: {self.stack.unexpected}\n{self.stack.logs()}"
        )
        verdict = checker.verdict(expect)
        codes = self.stack.stop_all()
        assert settled, f"not settled in {settle_s:g}s: {verdict}\n{self.stack.logs()}"
        assert set(codes.values()) == {0}, f"exit codes {codes}\n{self.stack.logs()}"
        return verdict
