"""One total deadline per outbound call (DESIGN.md §10 "Limits"): a peer that trickles its answer
one byte at a time never holds a governed tool call or a webhook past its timeout.

A real local TCP server trickles a response (headers, or body) for far longer than the caller's
timeout; each test asserts the call came back ``timeout`` while the server was still sending.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from pipeline.config import ToolConfig
from pipeline.http import make_client, post
from pipeline.rules.outcomes import ErrorCode
from producers.ticker.tools import HttpJsonTool, ToolRequest

pytestmark = pytest.mark.integration

TRICKLE_S = 0.2  # one byte this often: each read returns well within any per-read timeout
BYTES = 200  # 40 s of trickling: far past every timeout below


class Trickler:
    """Accepts connections and answers each by trickling ``response`` one byte at a time."""

    def __init__(self, response: bytes) -> None:
        self.response = response
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.finished = threading.Event()  # a whole response was sent
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                for byte in self.response:
                    if self.stop.wait(TRICKLE_S):
                        return
                    conn.sendall(bytes([byte]))
                self.finished.set()
            except OSError:
                return  # the caller gave up and closed

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.server.close()


@pytest.fixture(params=["headers", "body"])
def trickler(request: pytest.FixtureRequest) -> Iterator[Trickler]:
    if request.param == "headers":
        response = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"X: y\r\n" * 40
    else:
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {BYTES}\r\n\r\n".encode()
        response = head + b" " * (BYTES - 2) + b"{}"
    server = Trickler(response)
    yield server
    server.close()


def test_governed_tool_call_trickled_answer_is_a_timeout_within_its_deadline(
    trickler: Trickler,
) -> None:
    config = ToolConfig(
        kind="http.json@v1", url=f"http://127.0.0.1:{trickler.port}/s", timeout=timedelta(seconds=1)
    )
    tool = HttpJsonTool({"status": config})
    request = ToolRequest(
        tool="http.json@v1",
        tenant_id="acme",
        user_id="u-1",
        watcher_id="w-1",
        source_id="status.page",
        scheduled_at=datetime(2026, 1, 1, tzinfo=UTC),
        tool_ref="status",
    )
    try:
        result = tool.call(request)
    finally:
        tool.close()
    assert result.error is ErrorCode.TIMEOUT
    assert not trickler.finished.is_set()  # answered while the server was still trickling


def test_webhook_post_trickled_answer_is_a_timeout_within_its_deadline(
    trickler: Trickler,
) -> None:
    client = make_client()
    try:
        reply = post(
            client,
            f"http://127.0.0.1:{trickler.port}/hook",
            content=b"{}",
            headers={"Content-Type": "application/json"},
            timeout=timedelta(seconds=1),
        )
    finally:
        client.close()
    assert reply is ErrorCode.TIMEOUT
    assert not trickler.finished.is_set()
