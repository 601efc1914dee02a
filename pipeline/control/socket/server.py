"""The daemon's transport: JSON lines over a local Unix socket, mode 0600 (seed 001, DESIGN.md §5).

Owns :func:`default_socket_path` (``--socket`` → ``$VIGIL_SOCKET`` → ``[rpc] socket_path`` →
``$XDG_RUNTIME_DIR/vigil.sock`` → ``~/.config/vigil/vigil.sock``) and :class:`SocketServer`. Left
out: what a request means (``dispatch``) and who the peer acts as beyond its uid (the ``handler``,
with ``pipeline.control.identity``)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from prometheus_client import Counter

from pipeline.control.isolation import process_info
from pipeline.control.socket.claim import claim_directory, clear_path, hand_to
from pipeline.control.socket.slots import Slots
from pipeline.control.verbs import VerbErrorKind, VerbResponse
from pipeline.rules.errors import ConfigError

__all__ = [
    "IDLE_S",
    "MAX_CONNECTIONS",
    "MAX_LINE",
    "SOCKET_ENV",
    "Handler",
    "Peer",
    "SocketServer",
    "default_socket_path",
]

log = logging.getLogger(__name__)

MAX_LINE: Final = 64 * 1024
MAX_CONNECTIONS: Final = 64
IDLE_S: Final = 30.0
SOCKET_ENV: Final = "VIGIL_SOCKET"
SOCKET_NAME: Final = "vigil.sock"
_CHUNK: Final = 4096
_REFUSAL_S: Final = 1.0  # to write a refusal to a peer that does not read
_CLOSED: Final = Counter(
    "vigil_daemon_socket_closed",
    "Control-socket connections the daemon closed itself, by reason: busy (refused, every slot "
    "busy), evicted (its idle slot went to a newer connection), idle (no request in time).",
    ["reason"],
)
_BUSY: Final = "the vigil daemon is serving as many connections as it allows: try again"
_EVICTED: Final = "closed to make room for a newer connection: reconnect to ask"


@dataclass(frozen=True, slots=True)
class Peer:
    """A connected process as ``SO_PEERCRED`` named it at connect, with its start time then
    (clock ticks after boot; None when it was already gone): who asks on every later line."""

    pid: int
    uid: int
    start: int | None = None

    @classmethod
    def at_connect(cls, pid: int, uid: int) -> Peer:
        info = process_info(pid)
        return cls(pid, uid, None if info is None else info.start)

    def unchanged(self) -> bool:
        """Whether the process that connected still runs (same pid, same start time): else
        it is gone, or its pid now names another process — fail-closed, never the user."""
        info = process_info(self.pid)
        return self.start is not None and info is not None and info.start == self.start


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
    """Serves ``handler`` on ``path`` until :meth:`close`. ``start`` binds (or raises).

    It claims the path (``claim``), creates the socket 0600 under a 0177 umask, hands it to
    ``owner`` when named (the directory stays the daemon's, 0711), admits peers whose
    ``SO_PEERCRED`` uid is in ``peers`` and serves each connection on its own thread, one JSON
    object per line each way. A line that is not JSON, names no verb or exceeds :data:`MAX_LINE`
    gets an error and serving goes on. At most ``max_connections`` at once (``slots``); a connection
    idle for ``idle`` is closed; each close is answered and counted in
    ``vigil_daemon_socket_closed_total{reason}``."""

    def __init__(
        self,
        path: Path,
        handler: Handler,
        *,
        max_line: int = MAX_LINE,
        max_connections: int = MAX_CONNECTIONS,
        idle_s: float = IDLE_S,
        owner: int | None = None,
        peers: Collection[int] | None = None,
        remove_dir: bool = False,
    ) -> None:
        """``max_connections``: served at once; ``idle_s``: how long a connection may take to
        send a complete request (from connect, or from its last answer); ``owner``: the uid the
        socket is handed to (its directory stays ours, 0711); ``peers``: the uids let in
        (default: ours); ``remove_dir``: the directory is this server's own (a fresh private
        one) and goes with it on :meth:`close`."""
        self.path = path
        self._handler = handler
        self._max_line = max_line
        self._slots = Slots(max_connections)
        self._idle_s = idle_s
        self._owner = owner
        self._peers = frozenset({os.getuid()} if peers is None else peers)
        self._sock: socket.socket | None = None
        self._inode: int | None = None
        self._directory: int | None = None
        self._remove_dir = remove_dir
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind 0600 in a directory of ours (``claim``): a live daemon on the path refuses, a
        stale socket or a listener that is no vigil daemon is replaced."""
        directory = claim_directory(self.path.parent, shared=self._owner is not None)
        sock: socket.socket | None = None
        try:
            clear_path(self.path, directory)
            sock = self._bind()
            if self._owner is not None:
                hand_to(self.path, directory, self._owner)
            self._inode = os.stat(self.path.name, dir_fd=directory, follow_symlinks=False).st_ino
        except BaseException:
            if sock is not None:
                sock.close()
            os.close(directory)
            raise
        self._directory = directory
        sock.listen(128)
        sock.settimeout(0.2)
        self._sock = sock
        self._thread = threading.Thread(
            target=self._accept_loop, name="control-socket", daemon=True
        )
        self._thread.start()
        log.info("control plane listening on %s", self.path)

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is 0600 from its first instant
        try:
            sock.bind(str(self.path))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"cannot bind the control socket {self.path}: {exc.strerror}"
            ) from None
        finally:
            os.umask(old)
        return sock

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        directory, self._directory = self._directory, None
        if directory is None:
            return
        # Remove the socket only if it is still ours (not a successor's).
        with contextlib.suppress(OSError):
            found = os.stat(self.path.name, dir_fd=directory, follow_symlinks=False)
            if found.st_ino == self._inode:
                os.unlink(self.path.name, dir_fd=directory)
        if self._remove_dir:
            with contextlib.suppress(OSError):
                os.rmdir(self.path.parent)
        os.close(directory)

    def __enter__(self) -> SocketServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

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
            if not self._slots.admit(conn):
                _CLOSED.labels("busy").inc()
                with conn:
                    conn.settimeout(_REFUSAL_S)
                    self._reply(conn, VerbResponse.failure(VerbErrorKind.BUSY, _BUSY))
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            closing: VerbResponse | None = None
            try:
                peer = self._peer(conn)
                if peer is not None:
                    closing = self._converse(conn, peer)
            finally:
                if self._slots.leave(conn):
                    _CLOSED.labels("evicted").inc()
                    closing = VerbResponse.failure(VerbErrorKind.BUSY, _EVICTED)
            if closing is not None:
                conn.settimeout(_REFUSAL_S)
                self._reply(conn, closing)

    def _peer(self, conn: socket.socket) -> Peer | None:
        """The peer by ``SO_PEERCRED``, or None (answered) when its uid is not let in."""
        pid, uid, _gid = struct.unpack(
            "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        )
        if uid in self._peers:
            return Peer.at_connect(pid, uid)
        log.warning("refused a control-socket peer with uid %s (pid %s)", uid, pid)
        self._reply(
            conn,
            VerbResponse.failure(VerbErrorKind.UNAUTHENTICATED, "this daemon serves another user"),
        )
        return None

    def _converse(self, conn: socket.socket, peer: Peer) -> VerbResponse | None:
        """Answer each request line until the peer leaves, goes idle (answered with why) or
        loses its slot to a newer connection."""
        lines = _Lines(conn, self._max_line, self._idle_s, self._stop)
        for line in lines:
            if not self._slots.busy(conn):
                return None  # its slot went to a newer connection: told so on leaving
            if line is None:
                response = VerbResponse.failure(
                    VerbErrorKind.TOO_LARGE, f"a request line is at most {self._max_line} bytes"
                )
            else:
                response = self._answer(line, peer)
            sent = self._reply(conn, response)
            self._slots.wait(conn)
            if not sent:
                return None
        if not lines.idle:
            return None
        _CLOSED.labels("idle").inc()
        return VerbResponse.failure(
            VerbErrorKind.UNAVAILABLE, f"closed after {self._idle_s:g}s without a request"
        )

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

    def _reply(self, conn: socket.socket, response: VerbResponse) -> bool:
        data = response.model_dump_json(exclude_none=True).encode("utf-8") + b"\n"
        try:
            conn.sendall(data)
        except OSError:
            return False
        return True


class _Lines:
    """A connection's complete request lines; ``None`` for a line over the bound (the rest of
    it is skipped). Ends when the peer closes, the server stops or no complete line arrives
    within ``idle_s`` of the start or of the previous line's answer (then :attr:`idle`)."""

    def __init__(
        self, conn: socket.socket, max_line: int, idle_s: float, stop: threading.Event
    ) -> None:
        self._conn = conn
        self._max_line = max_line
        self._idle_s = idle_s
        self._stop = stop
        self.idle = False

    def __iter__(self) -> Iterator[bytes | None]:
        buffer = b""
        skipping = False
        deadline = time.monotonic() + self._idle_s
        while not self._stop.is_set():
            chunk = self._recv(deadline)
            if not chunk:
                return
            buffer += chunk
            while (newline := buffer.find(b"\n")) >= 0:
                line, buffer = buffer[:newline], buffer[newline + 1 :]
                if skipping:
                    skipping = False
                elif len(line) > self._max_line:
                    yield None
                elif line.strip():
                    yield line
                else:
                    continue
                deadline = time.monotonic() + self._idle_s  # answered: a fresh wait
            if len(buffer) > self._max_line and not skipping:
                skipping = True
                buffer = b""
                yield None
            elif skipping:
                buffer = b""

    def _recv(self, deadline: float) -> bytes:
        """The next bytes; empty when the peer closed or failed, or the deadline passed."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self.idle = True
            return b""
        self._conn.settimeout(remaining)
        try:
            return self._conn.recv(_CHUNK)
        except TimeoutError:
            self.idle = True
            return b""
        except OSError:
            return b""
