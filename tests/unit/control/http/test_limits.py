"""Request rates: a token bucket per key, its Retry-After, and the bound on how many it keeps;
the edge guard refuses a caller over its rate with 429 before reading a byte of the body."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
from starlette.types import Message, Receive, Scope, Send

from pipeline.control.http.auth import TokenDirectory
from pipeline.control.http.guard import EdgeGuard
from pipeline.control.http.limits import RateLimiter
from pipeline.rules.authz import Principal, Role

pytestmark = pytest.mark.unit


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_allowed_then_one_request_per_refill_with_the_wait_until_the_next() -> None:
    clock = Ticks()
    limiter = RateLimiter(2.0, 3, clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]
    wait = limiter.take("a")
    assert wait == pytest.approx(0.5)
    clock.now = 0.5
    assert limiter.take("a") is None
    assert limiter.take("a") == pytest.approx(0.5)
    assert limiter.take("b") is None, "another key has its own bucket"


def test_a_refused_request_spends_nothing_and_a_quiet_bucket_refills_to_its_burst_only() -> None:
    clock = Ticks()
    limiter = RateLimiter(1.0, 2, clock=clock)
    limiter.take("a"), limiter.take("a")
    for _ in range(100):
        assert limiter.take("a") == pytest.approx(1.0)
    clock.now = 1000.0
    assert [limiter.take("a") is None for _ in range(3)] == [True, True, False]


def test_the_map_keeps_at_most_max_keys_buckets() -> None:
    limiter = RateLimiter(1.0, 1, max_keys=10, clock=Ticks())
    for n in range(1000):
        limiter.take(f"k-{n}")
    assert len(limiter._buckets) == 10


WHO = Principal(name="owner", role=Role.USER, tenant_id="t", user_id="u")
TOKENS = TokenDirectory({hashlib.sha256(b"good").digest(): WHO})
HEADERS = [(b"authorization", b"Bearer good"), (b"vigil-protocol-version", b"1")]


def test_the_guard_answers_429_with_retry_after_once_the_principal_is_over_its_rate() -> None:
    sent: list[Message] = []
    reads = 0

    async def receive() -> Message:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    guard = EdgeGuard(app, tokens=TOKENS, limiter=RateLimiter(0.1, 2, clock=Ticks()))
    scope: Scope = {"type": "http", "path": "/v1/watches", "headers": HEADERS}
    statuses = []
    for _ in range(3):
        sent.clear()
        asyncio.run(guard(scope, receive, send))
        statuses.append(sent[0]["status"])
    assert statuses == [200, 200, 429]
    assert reads == 2, "the refused request's body is never read"
    headers = dict(sent[0]["headers"])
    assert headers[b"retry-after"] == b"10"
    assert json.loads(sent[1]["body"])["error"]["code"] == "rate_limited"
