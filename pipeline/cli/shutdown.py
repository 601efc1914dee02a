"""The one stop event of a long-running ``vigil`` process, armed before anything else loads.

A service told to stop while it is still importing or connecting must still stop cleanly
(commit, leave the group, exit 0), so :func:`arm` installs the SIGTERM/SIGINT handler as the
first thing ``main`` does for the service commands, and each service waits on
:func:`stop_event`. Short commands keep Python's default handling. Leaves out what a service does
on stop (the stream runtime's ``run`` commits and closes).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Final

__all__ = ["SERVICES", "arm", "catch", "stop_event"]

SERVICES: Final = frozenset({"command-processor", "evaluator", "ticker", "delivery", "daemon"})

_stop = threading.Event()


def stop_event() -> threading.Event:
    """The event every service loop waits on; set by SIGTERM/SIGINT once :func:`arm` ran."""
    return _stop


def _handler(signum: int, frame: FrameType | None) -> None:
    _stop.set()


def catch() -> threading.Event:
    """Set the stop event on SIGTERM/SIGINT from now on; returns it."""
    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    return _stop


def arm(argv: Sequence[str], commands: Sequence[str]) -> None:
    """Catch SIGTERM/SIGINT from now on when ``argv`` runs one of the :data:`SERVICES`."""
    command = next((arg for arg in argv if arg in commands), None)
    if command in SERVICES:
        catch()
