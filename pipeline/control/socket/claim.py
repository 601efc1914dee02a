"""Claiming the path a control socket binds: a stale or foreign path neither blocks nor hijacks the
daemon (DESIGN.md §10 "Secrets are out of the agent's reach").

Owns :func:`claim_directory` (the daemon's own, no symlink, writable by nobody else, worked on
through one ``O_NOFOLLOW`` descriptor), :func:`clear_path` (a stale socket is replaced, a live
daemon refused, another listener replaced with a warning) and :func:`hand_to`. Left out: binding and
serving (``server``) and choosing the path."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
import struct
from pathlib import Path
from typing import Final

from pipeline.rules.errors import ConfigError

__all__ = ["claim_directory", "clear_path", "hand_to"]

log = logging.getLogger(__name__)

_PROBE_TIMEOUT_S: Final = 1.0
_PROBE: Final = b'{"verb": "probe"}\n'  # a vigil daemon answers: unknown_verb, unauthenticated


def claim_directory(directory: Path, *, shared: bool = False) -> int:
    """A descriptor of ``directory`` (made 0700 when missing) once it is ours and writable by
    nobody else; ``shared`` opens it to traversal (0711). :class:`ConfigError` otherwise."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(
            f"{directory} is not a directory this daemon can use ({exc.strerror}): "
            "refusing to serve a socket in it"
        ) from None
    try:
        found = os.fstat(fd)
        mode = stat.S_IMODE(found.st_mode)
        if found.st_uid != os.geteuid():
            raise ConfigError(
                f"{directory} belongs to uid {found.st_uid}, not to this daemon (uid "
                f"{os.geteuid()}): refusing to serve a socket in it; remove it or choose another"
            )
        if mode & 0o022:
            raise ConfigError(
                f"{directory} is open to others (mode {mode:04o}; writable by group or others): "
                "refusing to serve a socket in it"
            )
        if shared:
            os.fchmod(fd, (mode & 0o700) | 0o011)
    except BaseException:
        os.close(fd)
        raise
    return fd


def clear_path(path: Path, directory_fd: int) -> None:
    """Make room for the socket at ``path`` (its directory claimed as ``directory_fd``)."""
    name = path.name
    try:
        found = os.stat(name, dir_fd=directory_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(found.st_mode):
        raise ConfigError(f"{path} exists and is not a socket: refusing to replace it")
    listener = _listener(path)
    if listener is None:
        log.info("replacing the stale control socket %s", path)
    else:
        pid, is_daemon = listener
        if is_daemon:
            raise ConfigError(
                f"a vigil daemon (pid {pid}) is already serving {path}: refusing to start"
            )
        log.warning(
            "replacing %s: pid %s listens on it but is no vigil daemon (%s)",
            path,
            pid,
            _command_of(pid),
        )
    os.unlink(name, dir_fd=directory_fd)


def hand_to(path: Path, directory_fd: int, uid: int) -> None:
    """Give the socket at ``path`` to ``uid`` through its directory, never through a link."""
    try:
        os.chown(path.name, uid, -1, dir_fd=directory_fd, follow_symlinks=False)
    except OSError as exc:
        raise ConfigError(f"cannot hand {path} to uid {uid}: {exc.strerror}") from None


def _listener(path: Path) -> tuple[int, bool] | None:
    """``(pid, is a vigil daemon)`` of what answers on ``path``; None when nothing does."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_PROBE_TIMEOUT_S)
    with probe:
        try:
            probe.connect(str(path))
        except OSError:
            return None
        pid = struct.unpack(
            "3i", probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        )[0]
        return pid, _answers_like_a_daemon(probe)


def _answers_like_a_daemon(probe: socket.socket) -> bool:
    """Whether the listener answers a probe line as a vigil daemon does: one JSON response
    line (``{"ok": …}``)."""
    data = b""
    with contextlib.suppress(OSError):
        probe.sendall(_PROBE)
    try:
        while b"\n" not in data and len(data) < 4096:
            chunk = probe.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        return False
    try:
        answer = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return False
    return isinstance(answer, dict) and isinstance(answer.get("ok"), bool)


def _command_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "unknown command"
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:120] or "unknown command"
