"""``http.json@v1``: GET the endpoint an operator configured and return its JSON object.

Owns :class:`HttpJsonTool`: the URL, token variable and timeout from ``[tools.NAME]`` (``kind``
exactly ``http.json@v1``), one deadline for the whole call, categorical errors, no redirects,
bodies never logged. Leaves out authorization, budgets and scheduling (the ticker's); a plain
GET costs no tokens or micro-USD.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Final

import httpx

from pipeline.config import ToolConfig
from pipeline.http import classify_error, classify_status, deadline, make_client
from pipeline.rules.errors import DefinitionError
from pipeline.rules.keys import canonical_json
from pipeline.rules.outcomes import ErrorCode
from producers.ticker.tools.base import ToolRequest, ToolResult

__all__ = ["KEY", "MAX_BODY_BYTES", "HttpJsonTool"]

KEY: Final = "http.json@v1"
MAX_BODY_BYTES: Final = 1024 * 1024
_ACCEPT: Final = {"Accept": "application/json"}


class HttpJsonTool:
    """GET ``[tools.<tool_ref>].url``; the answer is its JSON object.

    A definition names only ``tool_ref``; a definition pinned to v1 is never served by another
    version. Errors come from the shared tables of ``pipeline.http``: a missing or mis-kinded
    instance or an unset token is ``unavailable``; a body that is not a JSON object (or larger than
    1 MiB, or not canonical JSON: NaN, huge integers) is ``rejected``; an endpoint that trickles its
    answer past the deadline is a ``timeout``.
    """

    def __init__(
        self,
        instances: Mapping[str, ToolConfig],
        *,
        client: httpx.Client | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._instances = dict(instances)
        self._client = client
        self._environ = os.environ if environ is None else environ

    @property
    def key(self) -> str:
        return KEY

    @property
    def timeout(self) -> timedelta:
        """The registry's cap: the longest configured instance timeout plus a margin."""
        longest = max((c.timeout for c in self._instances.values()), default=timedelta(seconds=10))
        return longest + timedelta(seconds=1)

    def call(self, request: ToolRequest) -> ToolResult:
        if request.tool_ref is None:
            return ToolResult.failed(ErrorCode.REJECTED)
        instance = self._instances.get(request.tool_ref)
        if instance is None or instance.kind != KEY or instance.url is None:
            return ToolResult.failed(ErrorCode.UNAVAILABLE)
        headers = dict(_ACCEPT)
        if instance.token_env is not None:
            token = self._environ.get(instance.token_env)
            if not token:
                return ToolResult.failed(ErrorCode.UNAVAILABLE)
            headers["Authorization"] = f"Bearer {token}"
        return self._get(instance.url, headers, instance.timeout)

    def _get(self, url: str, headers: dict[str, str], timeout: timedelta) -> ToolResult:
        try:
            with (
                deadline(timeout),
                self._http().stream(
                    "GET", url, headers=headers, timeout=timeout.total_seconds()
                ) as response,
            ):
                code = classify_status(response.status_code)
                if code is not None:
                    return ToolResult.failed(code)
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        return ToolResult.failed(ErrorCode.REJECTED)
        except httpx.HTTPError as exc:
            return ToolResult.failed(classify_error(exc))
        except httpx.InvalidURL:
            return ToolResult.failed(ErrorCode.REJECTED)
        return _json_object(bytes(body))

    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = make_client()
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _json_object(body: bytes) -> ToolResult:
    try:
        value = json.loads(body, parse_constant=_no_constants)
        canonical_json(value)  # what a tick can carry: no NaN, integers within ±2^53
    except (ValueError, UnicodeDecodeError, DefinitionError, RecursionError):
        return ToolResult.failed(ErrorCode.REJECTED)
    if not isinstance(value, dict):
        return ToolResult.failed(ErrorCode.REJECTED)
    return ToolResult.ok(value)
