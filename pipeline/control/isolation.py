"""What a process vigil starts may see and who it runs as (DESIGN.md §10 "Agents are principals with
less power").

Owns :func:`allowlisted_env` (never vigil's secrets), :class:`AgentUser` (``[agent] run_as``),
:func:`can_switch_user`, :func:`agent_socket_path`, :func:`clean_start` (no capability, the agent
user's uid) and :func:`process_chain` (a process's ancestry from Linux ``/proc``). Left out: runs
and tokens (``agent``), a peer's principal (``identity``) and sockets (``socket.server``)."""

from __future__ import annotations

import os
import pwd
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pipeline.control.hardening import clear_capability_sets, drop_capabilities
from pipeline.rules.errors import ConfigError

__all__ = [
    "BASE_ENV",
    "AgentUser",
    "ProcessInfo",
    "agent_socket_path",
    "allowlisted_env",
    "can_switch_user",
    "clean_start",
    "process_chain",
    "process_info",
]

BASE_ENV: Final = ("PATH", "HOME", "LANG", "TZ")
_CAP_SETGID: Final = 6
_CAP_SETUID: Final = 7
_CHAIN_LIMIT: Final = 64


def allowlisted_env(environ: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``environ`` a started process may see: :data:`BASE_ENV` and ``extra``."""
    names = (*BASE_ENV, *extra)
    return {name: environ[name] for name in names if name in environ}


@dataclass(frozen=True, slots=True)
class AgentUser:
    """The local user ``[agent] run_as`` names."""

    name: str
    uid: int
    gid: int
    home: Path

    @classmethod
    def resolve(cls, name: str) -> AgentUser:
        """The user called ``name``; :class:`ConfigError` when it is missing or is no
        isolation at all (root, or the daemon's own user)."""
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise ConfigError(f"[agent] run_as: no local user {name!r}") from None
        if entry.pw_uid in (0, os.getuid()):
            raise ConfigError(
                f"[agent] run_as: {name!r} is root or the daemon's own user: no isolation"
            )
        return cls(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))

    def working_dir(self) -> Path:
        return self.home if self.home.is_dir() else Path("/")


def clean_start(user: AgentUser | None = None) -> Callable[[], None]:
    """What a child (the agent, a ``run`` script) does between fork and exec: drop every
    capability and the means to regain one (``hardening``), switching to ``user`` (no
    supplementary groups) in between, when one is given. Runs in the forked child: it touches
    nothing but the process itself."""

    def start() -> None:
        drop_capabilities()
        if user is not None:
            os.setgroups([])
            os.setresgid(user.gid, user.gid, user.gid)
            os.setresuid(user.uid, user.uid, user.uid)
        clear_capability_sets()

    return start


def can_switch_user(status: Path = Path("/proc/self/status")) -> bool:
    """Whether this process may start children under another uid and gid."""
    if os.geteuid() == 0:
        return True
    try:
        for line in status.read_text().splitlines():
            if line.startswith("CapEff:"):
                caps = int(line.split()[1], 16)
                return bool(caps >> _CAP_SETUID & 1 and caps >> _CAP_SETGID & 1)
    except (OSError, ValueError, IndexError):
        return False
    return False


def agent_socket_path(configured: Path | None, user: AgentUser) -> Path:
    """``[agent] socket_path``, else ``vigil.sock`` in a fresh private directory
    (``<tmp>/vigil-agent-<uid>-XXXXXXXX``, the daemon's, made now: no one can have squatted its
    name). Either directory stays the daemon's; only the socket is handed to the agent."""
    if configured is not None:
        return configured.expanduser()
    return Path(tempfile.mkdtemp(prefix=f"vigil-agent-{user.uid}-")) / "vigil.sock"


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One process as ``/proc/<pid>/stat`` tells it (``start``: clock ticks after boot)."""

    pid: int
    ppid: int
    group: int
    session: int
    start: int


def process_info(pid: int) -> ProcessInfo | None:
    """``pid``'s entry, or None when it is gone or unreadable."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        fields = text.rsplit(")", 1)[1].split()
        return ProcessInfo(pid, int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))
    except (OSError, ValueError, IndexError):
        return None


def process_chain(pid: int, limit: int = _CHAIN_LIMIT) -> list[ProcessInfo]:
    """``pid`` and its ancestors, nearest first; what is unreadable ends the chain."""
    chain: list[ProcessInfo] = []
    while pid > 1 and len(chain) < limit:
        info = process_info(pid)
        if info is None:
            break
        chain.append(info)
        pid = info.ppid
    return chain
