"""What a vigil process does so that the processes around it, an agent above all, cannot read its
secrets or inherit its powers (DESIGN.md §10 "Secrets are out of the agent's reach").

Owns :func:`harden` (non-dumpable: no ``/proc`` reads, ptrace or core dump by the same uid),
:func:`conceal` (secret variables leave the C environment and the initial environment block) and
:func:`drop_capabilities` (a child before its exec: no new privileges, no capabilities). Linux only.
What it cannot protect is listed in ``docs/operations.md``; ``[agent] run_as`` isolates."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

__all__ = ["clear_capability_sets", "conceal", "drop_capabilities", "harden", "is_hardened"]

_PR_SET_DUMPABLE: Final = 4
_PR_GET_DUMPABLE: Final = 3
_PR_CAPBSET_DROP: Final = 24
_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_CAP_AMBIENT: Final = 47
_PR_CAP_AMBIENT_CLEAR_ALL: Final = 4
_CAPABILITY_VERSION_3: Final = 0x20080522
_LAST_CAP_FILE: Final = Path("/proc/sys/kernel/cap_last_cap")
_ENV_START_FIELD: Final = 50  # /proc/<pid>/stat, 1-based: env_start, then env_end

_armed = False


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC: Final = _libc()


def harden() -> None:
    """Make this process non-dumpable and let :func:`conceal` act (a real ``vigil`` process:
    tests that call the CLI in-process never arm it)."""
    global _armed
    _armed = True
    if _LIBC is not None and hasattr(_LIBC, "prctl"):
        _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def is_hardened() -> bool:
    """Whether this process is non-dumpable (what :func:`harden` made it)."""
    if _LIBC is None or not hasattr(_LIBC, "prctl"):
        return False
    return int(_LIBC.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)) == 0


def conceal(names: Iterable[str]) -> None:
    """Drop the variables ``names`` from the C environment and blank them in the initial
    environment block (``/proc/self/environ``); ``os.environ`` keeps them for late readers."""
    if not _armed:
        return
    wanted = {name for name in names if name}
    for name in wanted:
        with contextlib.suppress(OSError, ValueError):
            os.unsetenv(name)
    _blank_initial_environment(wanted)


def _blank_initial_environment(names: set[str]) -> None:
    """Overwrite ``NAME=value`` entries of the initial block in place, with zero bytes."""
    try:
        stat = Path("/proc/self/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        start = int(fields[_ENV_START_FIELD - 3])  # fields after ")" start at field 3
        end = int(fields[_ENV_START_FIELD - 2])
        block = Path("/proc/self/environ").read_bytes()
    except (OSError, ValueError, IndexError):
        return
    if not start or len(block) > end - start:
        return
    offset = 0
    for entry in block.split(b"\0"):
        name = entry.split(b"=", 1)[0].decode("utf-8", "replace")
        if entry and name in names:
            ctypes.memset(start + offset, 0, len(entry))
        offset += len(entry) + 1


def drop_capabilities() -> None:
    """In a child before its exec (and before it switches user): no new privileges (setuid
    binaries and file capabilities grant nothing), no ambient capability, an empty bounding set
    (so even a child of root gets nothing on exec). Best effort: what the kernel refuses (no
    ``CAP_SETPCAP`` for the bounding set) is left, never an error. Then, after any user switch,
    :func:`clear_capability_sets`."""
    libc = _LIBC
    if libc is None or not hasattr(libc, "prctl"):
        return
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(_LAST_CAP + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)


def clear_capability_sets() -> None:
    """Empty the permitted, effective and inheritable sets (always allowed: it only lowers)."""
    libc = _LIBC
    if libc is None or not hasattr(libc, "capset"):
        return
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    libc.capset(ctypes.byref(header), ctypes.byref(data))


def _last_cap() -> int:
    try:
        return int(_LAST_CAP_FILE.read_text())
    except (OSError, ValueError):
        return 63


_LAST_CAP: Final = _last_cap()
