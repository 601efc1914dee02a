"""The daemon's transport: JSON lines over a local Unix socket, mode 0600 (seed 001, DESIGN.md §5).

Owns :func:`default_socket_path` (``--socket`` → ``$VIGIL_SOCKET`` → ``[rpc] socket_path`` →
``$XDG_RUNTIME_DIR/vigil.sock`` → ``~/.config/vigil/vigil.sock``) and :class:`SocketServer`:
it refuses to start on a socket a live daemon answers on, replaces a stale one, creates the
socket 0600 (under a 0077 umask, so it never exists wider) in a 0700 directory — both handed to
``owner`` when one is named (the agent's own socket under ``[agent] run_as``, whose directory
must not be anyone else's) — authenticates each peer by ``SO_PEERCRED`` (its uid must be one of
``peers``: by default ours, the configured subject's), and serves each connection on its own
thread: one JSON object per line in, one per line out. A line that is not JSON, names no known
verb or exceeds :data:`MAX_LINE` gets an error response; the daemon keeps serving (an oversized
line is skipped to its end).

Left out: what a request means (``dispatch``) and who the peer acts as beyond its uid (the
``handler`` decides with :class:`Peer`: ``pipeline.control.identity``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
import struct
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pipeline.control.verbs import VerbErrorKind, VerbResponse
from pipeline.rules.errors import ConfigError

__all__ = [
    "MAX_LINE",
    "SOCKET_ENV",
    "Handler",
    "Peer",
    "SocketServer",
    "default_socket_path",
]

log = logging.getLogger(__name__)

MAX_LINE: Final = 64 * 1024
SOCKET_ENV: Final = "VIGIL_SOCKET"
SOCKET_NAME: Final = "vigil.sock"
_PROBE_TIMEOUT_S: Final = 1.0
_CHUNK: Final = 4096


@dataclass(frozen=True, slots=True)
class Peer:
    pid: int
    uid: int


Handler = Callable[[object, Peer], VerbResponse]


def default_socket_path(
    flag: Path | None = None,
    configured: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """Where the socket is: ``--socket``, ``$VIGIL_SOCKET``, ``[rpc] socket_path``, then
    ``$XDG_RUNTIME_DIR/vigil.sock``, then ``~/.config/vigil/vigil.sock``."""
    env = os.environ if environ is None else environ
    if flag is not None:
        return flag.expanduser()
    if env.get(SOCKET_ENV):
        return Path(env[SOCKET_ENV]).expanduser()
    if configured is not None:
        return configured.expanduser()
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / SOCKET_NAME
    return Path("~/.config/vigil").expanduser() / SOCKET_NAME


class SocketServer:
    """Serves ``handler`` on ``path`` until :meth:`close`. ``start`` binds (or raises)."""

    def __init__(
        self,
        path: Path,
        handler: Handler,
        *,
        max_line: int = MAX_LINE,
        owner: int | None = None,
        peers: Collection[int] | None = None,
    ) -> None:
        self.path = path
        self._handler = handler
        self._max_line = max_line
        self._owner = owner
        self._peers = frozenset({os.getuid()} if peers is None else peers)
        self._sock: socket.socket | None = None
        self._inode: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind 0600, refusing a socket a live daemon holds and replacing a stale one."""
        self._claim_path()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"cannot bind the control socket {self.path}: {exc.strerror}"
            ) from None
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        if self._owner is not None:
            os.chown(self.path, self._owner, -1)
        self._inode = os.stat(self.path).st_ino
        sock.listen(64)
        sock.settimeout(0.2)
        self._sock = sock
        self._thread = threading.Thread(
            target=self._accept_loop, name="control-socket", daemon=True
        )
        self._thread.start()
        log.info("control plane listening on %s", self.path)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        # Remove the socket only if it is still ours (not a successor's).
        with contextlib.suppress(OSError):
            if self._inode is not None and os.stat(self.path).st_ino == self._inode:
                self.path.unlink()

    def __enter__(self) -> SocketServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

    def _claim_path(self) -> None:
        path = self.path
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self._owner is not None:
            self._hand_over(path.parent, self._owner)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise ConfigError(f"{path} exists and is not a socket: refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(_PROBE_TIMEOUT_S)
        try:
            probe.connect(str(path))
        except OSError:
            log.info("replacing the stale control socket %s", path)
            path.unlink()
            return
        finally:
            probe.close()
        raise ConfigError(f"a vigil daemon is already serving {path}: refusing to start")

    @staticmethod
    def _hand_over(directory: Path, owner: int) -> None:
        """Give ``directory`` (ours or already the owner's, mode 0700) to ``owner``."""
        found = os.lstat(directory)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid not in (owner, os.getuid()):
            raise ConfigError(f"{directory} belongs to someone else: refusing to use it")
        if stat.S_IMODE(found.st_mode) & 0o077:
            raise ConfigError(f"{directory} is open to others (mode 0700 expected)")
        try:
            os.chown(directory, owner, -1)
        except OSError as exc:
            raise ConfigError(f"cannot hand {directory} to uid {owner}: {exc.strerror}") from None

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                raise
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(None)
            pid, uid, _gid = struct.unpack(
                "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            )
            if uid not in self._peers:
                log.warning("refused a control-socket peer with uid %s (pid %s)", uid, pid)
                self._reply(
                    conn,
                    VerbResponse.failure(
                        VerbErrorKind.UNAUTHENTICATED, "this daemon serves another user"
                    ),
                )
                return
            peer = Peer(pid=pid, uid=uid)
            for line in self._lines(conn):
                if line is None:
                    response = VerbResponse.failure(
                        VerbErrorKind.TOO_LARGE, f"a request line is at most {self._max_line} bytes"
                    )
                else:
                    response = self._answer(line, peer)
                if not self._reply(conn, response):
                    return

    def _answer(self, line: bytes, peer: Peer) -> VerbResponse:
        try:
            body = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            return VerbResponse.failure(
                VerbErrorKind.MALFORMED, "a request is one JSON object per line"
            )
        if not isinstance(body, dict):
            return VerbResponse.failure(VerbErrorKind.MALFORMED, "a request is a JSON object")
        try:
            return self._handler(body, peer)
        except Exception:
            log.exception("control handler failed")
            return VerbResponse.failure(
                VerbErrorKind.INTERNAL, "internal error (see the daemon log)"
            )

    def _lines(self, conn: socket.socket) -> Iterator[bytes | None]:
        """Complete lines; ``None`` for a line over the bound (the rest of it is skipped)."""
        buffer = b""
        skipping = False
        while not self._stop.is_set():
            try:
                chunk = conn.recv(_CHUNK)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while True:
                newline = buffer.find(b"\n")
                if newline < 0:
                    break
                line, buffer = buffer[:newline], buffer[newline + 1 :]
                if skipping:
                    skipping = False
                    continue
                if len(line) > self._max_line:
                    yield None
                    continue
                if line.strip():
                    yield line
            if len(buffer) > self._max_line and not skipping:
                skipping = True
                buffer = b""
                yield None
            elif skipping:
                buffer = b""

    def _reply(self, conn: socket.socket, response: VerbResponse) -> bool:
        data = response.model_dump_json(exclude_none=True).encode("utf-8") + b"\n"
        try:
            conn.sendall(data)
        except OSError:
            return False
        return True
