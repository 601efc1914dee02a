"""The control socket's bounds: connections at once, idle time, request size.

A real :class:`SocketServer` on a temp Unix socket and real client sockets; the handler can be
held busy to fill every slot.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from pipeline.control.socket.client import call
from pipeline.control.socket.server import Peer, SocketServer
from pipeline.control.verbs import VerbResponse

pytestmark = pytest.mark.unit


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(path))
    return sock


def _reply(sock: socket.socket) -> dict[str, Any] | None:
    """The one line the daemon sent before closing, or None when it closed without one."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return json.loads(data) if data else None


def _code(reply: dict[str, Any] | None) -> str | None:
    return None if reply is None else reply.get("error", {}).get("code")


class Held:
    """Answers to ``hold`` wait for :attr:`release`; :meth:`holding` waits for n of them."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self._held = threading.Semaphore(0)

    def handle(self, body: object, peer: Peer) -> VerbResponse:
        if isinstance(body, dict) and body.get("verb") == "hold":
            self._held.release()
            self.release.wait(30)
        return VerbResponse.success(body=body)

    def holding(self, n: int) -> None:
        for _ in range(n):
            assert self._held.acquire(timeout=20), "a held request never reached the handler"


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[SocketServer, Held]]:
    """A server of 3 slots whose ``hold`` answers wait (released on teardown)."""
    hold = Held()

    server = SocketServer(tmp_path / "run" / "v.sock", hold.handle, max_connections=3, idle_s=30)
    server.start()
    try:
        yield server, hold
    finally:
        hold.release.set()
        server.close()


def test_idle_connections_past_the_cap_yield_to_a_client_that_asks(
    held: tuple[SocketServer, Held],
) -> None:
    server, _hold = held
    with ExitStack() as stack:
        idle = [stack.enter_context(_connect(server.path)) for _ in range(20)]
        # 20 idle connections on 3 slots: each newer one took the oldest one's slot, and the
        # 17 that lost theirs were told why and closed.
        lost = [_code(_reply(sock)) for sock in idle[:17]]
        assert lost == ["busy"] * 17
        answer = call(server.path, {"verb": "list"}, starting_wait_s=0)
        assert answer.ok, answer  # served at once: it took an idle slot
        assert _code(_reply(idle[17])) == "busy"  # the oldest of the rest made room


def test_with_every_slot_answering_a_new_connection_is_refused_busy_and_closed(
    held: tuple[SocketServer, Held],
) -> None:
    server, hold = held
    with ExitStack() as stack:
        busy = [stack.enter_context(_connect(server.path)) for _ in range(3)]
        for sock in busy:
            sock.sendall(b'{"verb": "hold"}\n')
        hold.holding(3)
        refused = call(server.path, {"verb": "list"}, starting_wait_s=0)
        assert refused.error is not None and refused.error.code.value == "busy"
        assert "as many connections" in refused.error.message
        hold.release.set()
        assert [_reply(sock) for sock in busy] == [
            {"ok": True, "result": {"body": {"verb": "hold"}}}
        ] * 3
        assert call(server.path, {"verb": "list"}, starting_wait_s=0).ok


def test_a_busy_daemon_is_asked_again_until_a_slot_frees(
    held: tuple[SocketServer, Held],
) -> None:
    server, hold = held
    with ExitStack() as stack:
        for _ in range(3):
            stack.enter_context(_connect(server.path)).sendall(b'{"verb": "hold"}\n')
        hold.holding(3)
        threading.Timer(1.0, hold.release.set).start()
        answer = call(server.path, {"verb": "list"}, starting_wait_s=20)
        assert answer.ok, answer


def test_a_connection_without_a_complete_request_in_time_is_told_and_closed(
    tmp_path: Path,
) -> None:
    def echo(body: object, peer: Peer) -> VerbResponse:
        return VerbResponse.success(body=body)

    with SocketServer(tmp_path / "v.sock", echo, idle_s=1.0) as server:
        with _connect(server.path) as silent, _connect(server.path) as trickle:
            trickle.sendall(b'{"verb": ')  # a request that never ends
            for _ in range(5):
                time.sleep(0.3)
                try:
                    trickle.sendall(b" ")
                except OSError:
                    break
            for sock in (silent, trickle):
                reply = _reply(sock)
                assert _code(reply) == "unavailable"
                assert reply is not None and "without a request" in reply["error"]["message"]
        with _connect(server.path) as talker:  # answered requests restart the wait
            for _ in range(3):
                talker.sendall(b'{"verb": "list"}\n')
                assert _reply(talker) == {"ok": True, "result": {"body": {"verb": "list"}}}
                time.sleep(0.6)


def test_a_full_listen_backlog_is_busy_for_the_client_not_a_broken_daemon(tmp_path: Path) -> None:
    path = tmp_path / "b.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener, ExitStack() as fillers:
        listener.bind(str(path))
        listener.listen(0)  # and never accepts
        for _ in range(100):
            filler = fillers.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            filler.setblocking(False)
            try:
                filler.connect(str(path))
            except BlockingIOError:
                break
        else:
            pytest.fail("the backlog never filled")
        answer = call(path, {"verb": "list"}, starting_wait_s=0)
        assert answer.error is not None and answer.error.code.value == "busy"
