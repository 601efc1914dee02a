"""Riding out a broker that restarts or stalls: back off, resync, go on (DESIGN.md §10).

Owns :func:`run_steps`: a transient broker failure or a fenced producer anywhere in a step marks
the member to resync, and the loop waits before the next step (doubling from 0.2 s to 5 s,
reset by a step that succeeds); a stage's own transient failures wait the same way; anything
else propagates. Leaves out what a step does and how a member resyncs (``transactions``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.kafka.clients import BrokerFailure, ErrorKind, is_transient

__all__ = ["Backoff", "Resyncable", "run_steps"]

log = logging.getLogger(__name__)


class Resyncable(Protocol):
    """What the loop needs of a stream app."""

    group_id: str

    def request_resync(self, reason: BaseException | str) -> None: ...


@dataclass(slots=True)
class Backoff:
    """Waits that double from ``start_s`` up to ``max_s`` and start over after a success."""

    start_s: float = 0.2
    max_s: float = 5.0
    _next: float = field(default=0.0, init=False)

    def wait(self) -> float:
        """The wait before the next try (and double the one after)."""
        current = self._next or self.start_s
        self._next = min(current * 2, self.max_s)
        return current

    def reset(self) -> None:
        self._next = 0.0


def run_steps(
    app: Resyncable,
    step: Callable[[], object],
    stop: threading.Event,
    *,
    start: Callable[[], object] | None = None,
    also: tuple[type[Exception], ...] = (),
    on_failure: Callable[[Exception, float], None] | None = None,
    backoff: Backoff | None = None,
) -> None:
    """Call ``step`` until ``stop`` is set, riding out transient failures (module docstring).

    ``start``: called first, again after the same waits while it fails transiently (a broker
    still starting or electing leaders when the process starts: it waits, it does not exit).
    ``also``: a stage's own transient failures (waited out, no resync asked: the stage's step
    already rolled back). ``on_failure(exc, wait_s)`` runs before each wait (metrics, logs).
    """
    backoff = backoff or Backoff()
    while start is not None and not stop.is_set():
        try:
            start()
        except Exception as exc:
            if not (is_transient(exc) or isinstance(exc, also)):
                raise
            wait = backoff.wait()
            log.warning("%s: start failed, retrying in %.1fs: %s", app.group_id, wait, exc)
            stop.wait(wait)
            continue
        backoff.reset()
        break
    while not stop.is_set():
        try:
            step()
        except Exception as exc:
            if is_transient(exc) or _fenced(exc):
                app.request_resync(exc)
            elif not isinstance(exc, also):
                raise
            wait = backoff.wait()
            if on_failure is not None:
                on_failure(exc, wait)
            else:
                log.warning("%s: step failed, retrying in %.1fs: %s", app.group_id, wait, exc)
            stop.wait(wait)
            continue
        backoff.reset()


def _fenced(exc: Exception) -> bool:
    """A fatal producer failure: the resync's new producer is the cure (a consumer's fatal
    failure is raised as permanent: nothing here rebuilds a consumer)."""
    return isinstance(exc, BrokerFailure) and exc.kind is ErrorKind.FATAL
