"""The HTTP front door as plain ASGI: who is calling is decided from the headers before one byte
of the body is read, and a body past the bound is refused whatever shape it arrives in."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from pipeline.control.http.auth import TokenDirectory
from pipeline.control.http.guard import PRINCIPAL, EdgeGuard
from pipeline.rules.authz import Principal, Role

pytestmark = pytest.mark.unit

WHO = Principal(name="owner", role=Role.USER, tenant_id="t", user_id="u")
TOKENS = TokenDirectory({hashlib.sha256(b"good").digest(): WHO})
GOOD = [(b"authorization", b"Bearer good"), (b"vigil-protocol-version", b"1")]


class Client:
    """Feeds ``chunks`` as the request body and records what the app and the guard did."""

    def __init__(self, chunks: list[bytes], headers: list[tuple[bytes, bytes]]) -> None:
        self.chunks = list(chunks)
        self.headers = headers
        self.reads = 0
        self.sent: list[Message] = []
        self.app_saw: tuple[bytes, Principal] | None = None

    async def receive(self) -> Message:
        self.reads += 1
        if not self.chunks:
            raise AssertionError("read past the end of the body: would wait forever")
        chunk = self.chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        self.app_saw = (message["body"], scope["state"][PRINCIPAL])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def run(self, max_body: int = 100) -> tuple[int, dict[str, Any]]:
        guard = EdgeGuard(self.app, tokens=TOKENS, max_body=max_body)
        scope: Scope = {"type": "http", "path": "/v1/watches", "headers": self.headers}
        asyncio.run(guard(scope, self.receive, self.send))
        status = self.sent[0]["status"]
        body = self.sent[1]["body"]
        return status, json.loads(body) if body else {}


def test_a_caller_without_a_good_token_or_protocol_is_refused_before_any_byte_is_read() -> None:
    for headers, status in (
        ([(b"vigil-protocol-version", b"1")], 401),
        ([(b"authorization", b"Bearer bad"), (b"vigil-protocol-version", b"1")], 401),
        ([(b"authorization", b"Bearer good")], 400),
    ):
        client = Client([b"{" * 50], headers)
        assert client.run()[0] == status
        assert client.reads == 0 and client.app_saw is None


def test_the_app_gets_the_whole_body_and_the_authenticated_principal() -> None:
    client = Client([b'{"a":', b" 1}"], GOOD)
    assert client.run()[0] == 200
    assert client.app_saw == (b'{"a": 1}', WHO)


@pytest.mark.parametrize(
    "chunks",
    [
        [b"x" * 101],  # one chunk past the bound
        [b"x" * 60, b"x" * 60],  # the final chunk crosses it
        [b"x" * 60, b"x" * 60, b"x" * 60],  # more follows once crossed: dropped
    ],
)
def test_a_body_past_the_bound_is_413_and_never_reaches_the_app(chunks: list[bytes]) -> None:
    client = Client(chunks, GOOD)
    status, body = client.run()
    assert (status, body["error"]["code"]) == (413, "too_large")
    assert client.app_saw is None and client.chunks == []


def test_a_declared_length_past_the_bound_is_refused_before_it_is_read_to_the_end() -> None:
    client = Client([b"x" * 10], [*GOOD, (b"content-length", b"101")])
    assert client.run()[0] == 413
    huge = Client([b"x"], [*GOOD, (b"content-length", str(1 << 30).encode())])
    assert huge.run()[0] == 413 and huge.reads == 0
    assert (b"connection", b"close") in huge.sent[0]["headers"]
