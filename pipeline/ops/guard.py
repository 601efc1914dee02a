"""What makes ``vigil dev``'s children die with it, however it is stopped.

Owns :func:`die_with_parent` (a ``preexec_fn``: SIGTERM when the parent dies, Linux
``PR_SET_PDEATHSIG``) and :class:`Guard` (for the detached broker and Redis: a process of its own
session runs the stop commands when ``vigil dev``'s pipe reads end-of-file, unless told ``done``).
Leaves out what is started (``pipeline.ops.dev_stack``) and the supervision itself."""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Final

__all__ = ["Guard", "die_with_parent"]

_PR_SET_PDEATHSIG: Final = 1
_DONE: Final = b"done\n"


def die_with_parent() -> None:
    """In a child before ``exec``: receive SIGTERM when the parent dies (Linux; else a no-op)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Guard:
    """A process that runs ``commands`` if this one dies before :meth:`release`."""

    def __init__(self, commands: Sequence[Sequence[str]], env: Mapping[str, str]) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.ops.guard", json.dumps([list(c) for c in commands])],
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C does not reach it
        )

    def release(self) -> None:
        """Everything was stopped cleanly: the guard exits without running its commands."""
        stdin: IO[bytes] | None = self._proc.stdin
        if stdin is not None:
            try:
                stdin.write(_DONE)
                stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


def _main(argv: Sequence[str]) -> int:
    """Wait for ``done`` or end-of-file on stdin; on end-of-file run each command."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    commands = json.loads(argv[1]) if len(argv) > 1 else []
    if sys.stdin.buffer.read() == _DONE:
        return 0
    for command in commands:
        try:
            subprocess.run(command, stdin=subprocess.DEVNULL, timeout=120, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv))
