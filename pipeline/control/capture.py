"""Bounded capture of a child's output: what the daemon keeps of an agent run's stdout and stderr.

Owns :func:`communicate`, :class:`subprocess.Popen.communicate` with a cap: it writes the input,
reads both pipes to their end and keeps at most ``cap`` bytes of each; the rest is read and
dropped (counted), so a child that talks without end neither grows the daemon's memory nor
blocks on a full pipe — it is not killed for talking, only for outliving the deadline.

Left out: starting and ending the child (``agent``) and what the output means.
"""

from __future__ import annotations

import os
import select
import selectors
import subprocess
import time
from dataclasses import dataclass
from typing import IO, Final, cast

__all__ = ["Captured", "communicate"]

_READ: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class Captured:
    stdout: bytes
    stderr: bytes
    stdout_dropped: int  # bytes read past the cap and not kept
    stderr_dropped: int


def communicate(proc: subprocess.Popen[bytes], data: bytes, cap: int, timeout_s: float) -> Captured:
    """Write ``data`` to ``proc``'s stdin, read its stdout and stderr to their end (at most
    ``cap`` bytes of each kept) and wait for it; :class:`subprocess.TimeoutExpired` past
    ``timeout_s`` (the caller ends it). All three pipes must be ``PIPE``."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    out, err = bytearray(), bytearray()
    read = {proc.stdout.fileno(): 0, proc.stderr.fileno(): 0}
    pending = memoryview(data)
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdin, selectors.EVENT_WRITE, None)
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout_s)
            for key, _ in selector.select(remaining):
                kept: bytearray | None = key.data
                if kept is None:
                    pending = _write(key.fd, pending)
                    done = not pending
                else:
                    chunk = os.read(key.fd, _READ)
                    read[key.fd] += len(chunk)
                    kept += chunk[: max(0, cap - len(kept))]
                    done = not chunk
                if done:
                    selector.unregister(key.fileobj)
                    cast(IO[bytes], key.fileobj).close()
    out_read, err_read = read.values()
    proc.wait(max(0.0, deadline - time.monotonic()))
    return Captured(bytes(out), bytes(err), out_read - len(out), err_read - len(err))


def _write(fd: int, pending: memoryview) -> memoryview:
    """Write what a ready pipe takes without blocking; what is left (empty: done, or the
    reader closed its end)."""
    try:
        written = os.write(fd, pending[: select.PIPE_BUF])
    except BrokenPipeError:
        return pending[:0]
    return pending[written:]
