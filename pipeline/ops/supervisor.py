"""A small process supervisor for ``vigil dev``: start a group, restart crashes, stop cleanly.

Owns :class:`Service` and :class:`Supervisor`: each service in its own session (Ctrl-C reaches only
the supervisor), restarted after a capped doubling backoff; :meth:`Supervisor.stop` sends SIGTERM,
waits, then SIGKILL; time is an injectable monotonic function. Leaves out what the services are
(``dev_stack``) and the terminal (``pipeline.cli.dev_cmd``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Final

from pipeline.ops.guard import die_with_parent

__all__ = ["Service", "ServiceState", "Supervisor"]

_STABLE_S: Final = 30.0  # up this long: the next crash starts the backoff over


class ServiceState(StrEnum):
    RUNNING = "running"
    BACKING_OFF = "backing_off"  # crashed; restarts at ``restart_at``
    STOPPED = "stopped"


@dataclass(slots=True)
class Service:
    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    log_path: Path
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    state: ServiceState = ServiceState.STOPPED
    restarts: int = 0
    started_at: float = 0.0
    restart_at: float = 0.0
    delay: float = 0.0
    last_exit: int | None = None
    history: list[str] = field(default_factory=list)


class Supervisor:
    """Runs services as one group. Call :meth:`poll` periodically from one thread."""

    def __init__(
        self,
        services: Sequence[Service],
        *,
        backoff_start_s: float = 1.0,
        backoff_max_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.services = list(services)
        self._start = backoff_start_s
        self._max = backoff_max_s
        self._clock = clock

    def start(self) -> None:
        for service in self.services:
            self._spawn(service)

    def _spawn(self, service: Service) -> None:
        service.log_path.parent.mkdir(parents=True, exist_ok=True)
        with service.log_path.open("ab") as log:
            service.proc = subprocess.Popen(
                list(service.argv),
                env=dict(service.env),
                cwd=service.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,  # only prctl, before exec
            )
        service.state = ServiceState.RUNNING
        service.started_at = self._clock()

    def poll(self) -> list[str]:
        """Notice exits and restart what is due; returns one message per event."""
        events: list[str] = []
        now = self._clock()
        for service in self.services:
            if service.state is ServiceState.RUNNING and service.proc is not None:
                code = service.proc.poll()
                if code is None:
                    continue
                service.last_exit = code
                up = now - service.started_at
                service.delay = (
                    self._start if up >= _STABLE_S or not service.delay else service.delay * 2
                )
                service.delay = min(service.delay, self._max)
                service.state = ServiceState.BACKING_OFF
                service.restart_at = now + service.delay
                events.append(
                    f"{service.name} exited with {code}; restarting in {service.delay:g}s "
                    f"(log: {service.log_path})"
                )
            elif service.state is ServiceState.BACKING_OFF and now >= service.restart_at:
                service.restarts += 1
                self._spawn(service)
                events.append(f"{service.name} restarted (restart {service.restarts})")
        return events

    def running(self) -> int:
        return sum(1 for s in self.services if s.state is ServiceState.RUNNING)

    def status(self) -> str:
        parts = []
        for s in self.services:
            mark = {"running": "up", "backing_off": "restarting", "stopped": "down"}[s.state]
            extra = f"×{s.restarts}" if s.restarts else ""
            parts.append(f"{s.name}:{mark}{extra}")
        return f"{self.running()}/{len(self.services)} up  " + " ".join(parts)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM every service (last started first), wait, then SIGKILL stragglers."""
        live = [s for s in reversed(self.services) if s.proc is not None and s.proc.poll() is None]
        for service in live:
            assert service.proc is not None
            _signal(service.proc, signal.SIGTERM)
        deadline = self._clock() + timeout_s
        for service in live:
            assert service.proc is not None
            try:
                service.proc.wait(max(0.1, deadline - self._clock()))
            except subprocess.TimeoutExpired:
                _signal(service.proc, signal.SIGKILL)
                service.proc.wait(10)
        for service in self.services:
            service.state = ServiceState.STOPPED


def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the service's own process group (it runs in its own session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
