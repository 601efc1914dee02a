"""The HTTP API's front door: who is calling, before anything reads what they sent (DESIGN.md §10).

Owns :class:`EdgeGuard`, a plain ASGI middleware in front of every ``/v1`` route: it checks
``Vigil-Protocol-Version: 1`` (400) and the bearer token (401) from the headers alone, then reads
the body — at most ``max_body`` bytes (default 1 MiB; a larger ``Content-Length`` or stream is
413 ``too_large``, and nothing past the bound is buffered) — and hands the app the authenticated
principal (``scope["state"]["principal"]``) and the buffered body. So an unauthenticated caller
never gets a byte parsed, and no caller gets an unbounded one. Probes and the OpenAPI document
pass through untouched.

Left out: the tokens (``auth.TokenDirectory``), the error vocabulary (``auth``) and the routes.
"""

from __future__ import annotations

from typing import Final

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline.control.http.auth import (
    PROTOCOL_HEADER,
    ApiCode,
    ApiError,
    TokenDirectory,
    check_protocol,
)

__all__ = ["DEFAULT_MAX_BODY", "PRINCIPAL", "EdgeGuard"]

DEFAULT_MAX_BODY: Final = 1 << 20
PRINCIPAL: Final = "principal"
_GUARDED: Final = "/v1/"


class EdgeGuard:
    """Authenticate, then bound and buffer the body, for every ``/v1`` request."""

    def __init__(
        self, app: ASGIApp, *, tokens: TokenDirectory, max_body: int = DEFAULT_MAX_BODY
    ) -> None:
        self.app = app
        self._tokens = tokens
        self._max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(_GUARDED):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            check_protocol(headers.get(PROTOCOL_HEADER))
            principal = self._tokens.authenticate(headers.get("authorization"))
            self._check_length(headers.get("content-length"))
            body = await self._read(receive)
        except ApiError as refusal:
            await _refuse(refusal, scope, receive, send)
            return
        scope.setdefault("state", {})[PRINCIPAL] = principal
        await self.app(scope, _replay(body, receive), send)

    def _check_length(self, declared: str | None) -> None:
        if declared is None:
            return
        if not declared.isdigit() or int(declared) > self._max_body:
            raise self._too_large()

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_body:
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def _too_large(self) -> ApiError:
        return ApiError(
            ApiCode.TOO_LARGE, f"a request body is at most {self._max_body} bytes", "body"
        )


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


async def _refuse(refusal: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
    headers = {"WWW-Authenticate": "Bearer"} if refusal.code is ApiCode.UNAUTHENTICATED else None
    if refusal.code is ApiCode.TOO_LARGE:
        headers = {"Connection": "close"}  # the rest of the body is never read
    response = JSONResponse(refusal.body(), status_code=refusal.status, headers=headers)
    await response(scope, receive, send)
