"""The MCP server: one tool, ``propose_watch``, that can only propose (seed 003, DESIGN.md §9, §10).

Owns :func:`build_server` (one tool taking the body of ``POST /v1/watches:propose``) and
:class:`ApiProposer` (sends it to the HTTP API with the agent's own token; the command processor
decides as for any client). It holds no key, no Kafka client and no principal; there is no approve,
cancel or list tool; a refusal is a tool error naming the API code. Left out: wiring
(``pipeline.cli.api_cmd``) and the rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

import anyio
import anyio.to_thread
import httpx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from pipeline.control.http.models import WatchBody

__all__ = ["TOOL_NAME", "ApiProposer", "Proposer", "build_server", "serve_stdio"]

TOOL_NAME: Final = "propose_watch"
PROPOSE_PATH: Final = "/v1/watches:propose"
_PROTOCOL: Final = "1"
_MAX_ERROR: Final = 500
_DESCRIPTION: Final = (
    "Propose a bounded agent watch over a supported condition. It starts `proposed`: only the "
    "session's owner or a manager can approve it (through the authenticated API). Arguments "
    "are the body of POST /v1/watches:propose: an agent watch is mode `once` with a pinned "
    "evaluator tool (agent.session.state@v1 or workflow.run.status@v1), a cadence of 1, 5, "
    "15 or 60 minutes, a window of 30m, 1h, 2h, 6h, 12h or 24h, a condition, a "
    "terminal_condition and a delivery target; mode defaults to once and a missing watcher_id "
    "is generated. An identical live proposal returns the existing watch with collapsed=true."
)

Proposer = Callable[[WatchBody], dict[str, Any]]


class ApiProposer:
    """``POST /v1/watches:propose`` on the HTTP API at ``base_url`` as the bearer of ``token``."""

    def __init__(self, base_url: str, token: str, *, timeout_s: float = 30.0) -> None:
        self._url = base_url.rstrip("/") + PROPOSE_PATH
        self._headers = {"Authorization": f"Bearer {token}", "Vigil-Protocol-Version": _PROTOCOL}
        self._timeout_s = timeout_s

    def __call__(self, body: WatchBody) -> dict[str, Any]:
        """The watch view the API answers, or :class:`ToolError` with its code and message."""
        try:
            response = httpx.post(
                self._url, json=body.definition(), headers=self._headers, timeout=self._timeout_s
            )
        except httpx.HTTPError as exc:
            raise ToolError(f"unavailable: the vigil API did not answer ({exc})") from None
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if response.status_code in (200, 201) and isinstance(answer, dict):
            return answer
        raise ToolError(_refusal(response.status_code, answer))


def _refusal(status: int, answer: object) -> str:
    """``code: message (field)`` from an API error body, else the HTTP status."""
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict):
        return f"unavailable: the vigil API answered HTTP {status}"
    field = error.get("field")
    where = f" ({field})" if field else ""
    return f"{error.get('code', status)}: {str(error.get('message', ''))[:_MAX_ERROR]}{where}"


def build_server(propose: Proposer) -> MCPServer:
    """The server whose one tool hands its body to ``propose`` (an :class:`ApiProposer`)."""
    server: MCPServer = MCPServer(
        name="vigil",
        instructions="vigil agent watches: you may propose; a person approves.",
    )

    async def propose_watch(
        purpose: str,
        source: dict[str, Any],
        delivery: dict[str, Any],
        watcher_id: str | None = None,
        mode: Literal["every", "once"] | None = None,
        condition: dict[str, Any] | None = None,
        terminal_condition: dict[str, Any] | None = None,
        expires_at: str | None = None,
        window: str | None = None,
        session_id: str | None = None,
        budgets: dict[str, Any] | None = None,
        retry: dict[str, Any] | None = None,
        privacy: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        try:
            body = WatchBody(
                watcher_id=watcher_id,
                purpose=purpose,
                source=source,
                delivery=delivery,
                mode=mode,
                condition=condition,
                terminal_condition=terminal_condition,
                expires_at=expires_at,
                window=window,
                session_id=session_id,
                budgets=budgets,
                retry=retry,
                privacy=privacy,
            )
        except ValidationError as exc:
            raise ToolError(f"invalid: {exc.errors()[0]['msg']}") from None
        # An HTTP round trip blocks: off the event loop, so the session keeps answering.
        return await anyio.to_thread.run_sync(propose, body)

    server.add_tool(propose_watch, name=TOOL_NAME, description=_DESCRIPTION)
    return server


def serve_stdio(server: MCPServer) -> None:
    """Serve on stdin/stdout until the client closes them."""
    anyio.run(server.run_stdio_async)
