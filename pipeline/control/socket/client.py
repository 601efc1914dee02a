"""The CLI's side of the control socket: one JSON request line out, one response line back.

Owns :func:`call`: a daemon ``starting`` or ``busy`` is asked again for a while; no daemon is a
:class:`ConfigError` saying how to start one; a daemon closing without an answer is a
:class:`VigilError`. Left out: finding the socket path
(``pipeline.control.socket.server.default_socket_path``) and printing."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from pipeline.control.verbs import VerbErrorKind, VerbResponse
from pipeline.rules.errors import ConfigError, VigilError

__all__ = ["DEFAULT_TIMEOUT_S", "STARTING_WAIT_S", "call"]

DEFAULT_TIMEOUT_S: Final = 300.0  # a prompt or query waits for the agent
STARTING_WAIT_S: Final = 20.0  # a daemon that is starting gets this long to be ready
_STARTING_PAUSE_S: Final = 0.5
_MAX_RESPONSE: Final = 16 * 1024 * 1024
_ASK_AGAIN: Final = frozenset({VerbErrorKind.STARTING, VerbErrorKind.BUSY})


def call(
    path: Path,
    request: dict[str, Any],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    starting_wait_s: float = STARTING_WAIT_S,
) -> VerbResponse:
    """Send ``request`` to the daemon at ``path`` and return its answer; a daemon that answers
    ``starting`` or ``busy`` is asked again every half second for up to ``starting_wait_s``."""
    deadline = time.monotonic() + starting_wait_s
    while True:
        response = _call_once(path, request, timeout_s)
        later = response.error is not None and response.error.code in _ASK_AGAIN
        if not later or time.monotonic() >= deadline:
            return response
        time.sleep(_STARTING_PAUSE_S)


def _call_once(path: Path, request: dict[str, Any], timeout_s: float) -> VerbResponse:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(str(path))
        except BlockingIOError:  # its backlog is full: as busy as a refusal, asked again
            return VerbResponse.failure(VerbErrorKind.BUSY, "the vigil daemon's backlog is full")
        except (FileNotFoundError, ConnectionRefusedError):
            raise ConfigError(
                f"no vigil daemon is listening on {path}: start one with `vigil daemon`"
            ) from None
        except OSError as exc:
            raise ConfigError(f"cannot reach the vigil daemon at {path}: {exc.strerror}") from None
        line = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        try:
            # A refused peer is answered and closed before the daemon reads: read that answer.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(line + b"\n")
            data = _read_line(sock)
        except TimeoutError:
            raise VigilError(f"the vigil daemon did not answer within {timeout_s:g}s") from None
        except OSError as exc:
            raise VigilError(f"the vigil daemon connection failed: {exc.strerror}") from None
    finally:
        sock.close()
    try:
        return VerbResponse.model_validate_json(data)
    except ValidationError:
        raise VigilError("the vigil daemon answered something unreadable") from None


def _read_line(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        newline = chunk.find(b"\n")
        if newline >= 0:
            chunks.append(chunk[:newline])
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > _MAX_RESPONSE:
            raise VigilError("the vigil daemon's answer is too large")
    data = b"".join(chunks)
    if not data:
        raise VigilError("the vigil daemon closed the connection without answering")
    return data
