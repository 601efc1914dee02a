"""The HTTP API's front door: who is calling, before anything reads what they sent (DESIGN.md §10).

Owns :class:`EdgeGuard`, a plain ASGI middleware in front of every ``/v1`` route: protocol header
(400), bearer token (401), the principal's rate (429 ``rate_limited``), then a body of at most
``max_body`` bytes (413 ``too_large``), handed on with the principal. An unauthenticated caller
never gets a byte read. Probes and the OpenAPI document pass through. Left out: the tokens and error
vocabulary (``auth``) and the routes."""

from __future__ import annotations

import json
from typing import Final

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline.control.http.auth import (
    PROTOCOL_HEADER,
    ApiCode,
    ApiError,
    TokenDirectory,
    check_protocol,
)
from pipeline.control.http.limits import RateLimiter
from pipeline.rules.authz import Principal

__all__ = ["DEFAULT_MAX_BODY", "PRINCIPAL", "EdgeGuard"]

DEFAULT_MAX_BODY: Final = 1 << 20
PRINCIPAL: Final = "principal"
_DRAIN_LIMIT: Final = 16 << 20  # read and dropped (never kept) so a refused client hears its 413
_GUARDED: Final = "/v1/"


class EdgeGuard:
    """Authenticate, then bound and buffer the body, for every ``/v1`` request.

    Headers alone decide 400 and 401; one request of the principal's rate is spent
    (``limits.RateLimiter``; over it 429 with ``Retry-After``); the body is read to ``max_body``
    (default 1 MiB) and nothing past the bound is buffered: what is left of a refused body (up to 16
    MiB) is read and dropped, so a client still sending hears its 413. The principal goes in
    ``scope["state"]["principal"]``; refusals are plain ASGI messages."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: TokenDirectory,
        max_body: int = DEFAULT_MAX_BODY,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.app = app
        self._tokens = tokens
        self._max_body = max_body
        self._limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(_GUARDED):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        try:
            check_protocol(headers.get(PROTOCOL_HEADER))
            principal = self._tokens.authenticate(headers.get("authorization"))
            self._check_rate(principal)
            self._check_length(declared)
        except ApiError as refusal:
            drained = refusal.code is not ApiCode.TOO_LARGE or await _drain(receive, declared)
            await _refuse(refusal, send, close=not drained)
            return
        body, finished = await self._read(receive)
        if body is None:
            drained = finished or await _drain(receive, None)
            await _refuse(self._too_large(), send, close=not drained)
            return
        scope.setdefault("state", {})[PRINCIPAL] = principal
        await self.app(scope, _replay(body, receive), send)

    def _check_rate(self, principal: Principal) -> None:
        wait = None if self._limiter is None else self._limiter.take(principal.name)
        if wait is not None:
            raise ApiError(
                ApiCode.RATE_LIMITED,
                f"too many requests from {principal.name}: retry after the Retry-After seconds",
                retry_after=wait,
            )

    def _check_length(self, declared: str | None) -> None:
        if declared is None:
            return
        if not declared.isdigit() or int(declared) > self._max_body:
            raise self._too_large()

    async def _read(self, receive: Receive) -> tuple[bytes | None, bool]:
        """The body (None once past the bound) and whether the client finished sending."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b"".join(chunks), True
            chunk = message.get("body", b"")
            size += len(chunk)
            finished = not message.get("more_body", False)
            if size > self._max_body:
                return None, finished
            chunks.append(chunk)
            if finished:
                return b"".join(chunks), True

    def _too_large(self) -> ApiError:
        return ApiError(
            ApiCode.TOO_LARGE, f"a request body is at most {self._max_body} bytes", "body"
        )


async def _drain(receive: Receive, declared: str | None) -> bool:
    """Drop what is left of a refused body (up to a bound), so the client, still sending,
    reads the 413 instead of a reset connection; False when a larger one is cut off."""
    if declared is not None and declared.isdigit() and int(declared) > _DRAIN_LIMIT:
        return False
    dropped = 0
    while dropped <= _DRAIN_LIMIT:
        message = await receive()
        if message["type"] != "http.request":
            return False
        dropped += len(message.get("body", b""))
        if not message.get("more_body", False):
            return True
    return False


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields the buffered body once, then what the server says next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(refusal: ApiError, send: Send, *, close: bool) -> None:
    """The refusal as plain ASGI messages (nothing here waits on the client)."""
    headers = [(b"content-type", b"application/json")]
    for name, value in refusal.headers().items():
        headers.append((name.lower().encode("ascii"), value.encode("ascii")))
    if close:
        headers.append((b"connection", b"close"))  # the rest of the body is never read
    body = json.dumps(refusal.body(), separators=(",", ":")).encode("utf-8")
    headers.append((b"content-length", str(len(body)).encode("ascii")))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
