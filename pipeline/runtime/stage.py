"""The one shape every stream stage has: built with no network, then run until stopped.

Owns :class:`Stage`: a constructor ``(settings, deps)`` — plain values, then collaborators —
that wires its :class:`~pipeline.runtime.app.StreamApp` without a network call, the app (for
readiness) and ``run(stop)``. Leaves out what a stage does (its own package) and the process
around it (``pipeline.cli.process.run_stage``).
"""

from __future__ import annotations

import threading
from typing import Protocol

from pipeline.runtime.app import StreamApp

__all__ = ["Stage"]


class Stage(Protocol):
    """A stream stage: its app, and a run until ``stop``."""

    @property
    def app(self) -> StreamApp: ...

    def run(self, stop: threading.Event) -> None: ...
