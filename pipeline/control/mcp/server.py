"""The MCP server: one tool, ``propose_watch``, that can only propose (seed 003, DESIGN.md §9).

Owns :func:`build_server` — an MCP server (the official ``mcp`` SDK) exposing exactly one tool,
whose arguments are the body of ``POST /v1/watches:propose`` (:class:`WatchBody`) and which
sends one ``propose`` command as the configured agent principal — and :func:`serve_stdio`.
The agent can ask; only authority can activate: there is no approve, cancel or list tool, the
server refuses to act as anything but an ``agent`` principal, and the command processor decides
the proposal (bounds, grants, collapse onto an identical live watch) exactly as for HTTP.
A refusal comes back as a tool error naming the API code (``denied: …``).

Left out: choosing the principal and wiring Kafka (``vigil mcp`` in ``pipeline.cli.api_cmd``)
and the rules themselves (``pipeline.rules.commands.apply``).
"""

from __future__ import annotations

from typing import Any, Final, Literal

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from pipeline.control.core import CommandPort
from pipeline.control.http.models import WatchBody
from pipeline.rules.authz import Principal, Role
from pipeline.rules.commands.model import CommandVerb
from pipeline.rules.errors import BrokerError, ConfigError, DefinitionError

__all__ = ["TOOL_NAME", "build_server", "propose", "serve_stdio"]

TOOL_NAME: Final = "propose_watch"
_DESCRIPTION: Final = (
    "Propose a bounded agent watch over a supported condition. It starts `proposed`: only the "
    "session's owner or a manager can approve it (through the authenticated API). Arguments "
    "are the body of POST /v1/watches:propose: an agent watch is mode `once` with a pinned "
    "evaluator tool (agent.session.state@v1 or workflow.run.status@v1), a cadence of 1, 5, "
    "15 or 60 minutes, a window of 30m, 1h, 2h, 6h, 12h or 24h, a condition, a "
    "terminal_condition and a delivery target; mode defaults to once and a missing watcher_id "
    "is generated. An identical live proposal returns the existing watch with collapsed=true."
)


def propose(commands: CommandPort, agent: Principal, body: WatchBody) -> dict[str, Any]:
    """Send one ``propose`` for ``agent``'s own subject and session; the watch view back, or
    :class:`ToolError` with the processor's code and message."""
    definition = body.definition()
    definition.setdefault("session_id", agent.session_id)
    try:
        command = commands.command(
            CommandVerb.PROPOSE, agent, agent.tenant_id, agent.user_id, definition=definition
        )
        result = commands.send(command)
    except DefinitionError as exc:
        raise ToolError(f"invalid: {exc}") from None
    except BrokerError as exc:
        raise ToolError(f"unavailable: {exc}") from None
    if result.error is not None:
        error = result.error
        where = f" ({error.field})" if error.field else ""
        raise ToolError(f"{error.code.value}: {error.message}{where}")
    return dict(result.result or {})


def build_server(commands: CommandPort, agent: Principal) -> MCPServer:
    """The server for one agent principal; refuses any other role."""
    if agent.role is not Role.AGENT:
        raise ConfigError(
            f"the MCP server acts as an agent principal; {agent.name!r} is {agent.role.value}"
        )
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
        # A command round trip blocks: off the event loop, so the session keeps answering.
        return await anyio.to_thread.run_sync(propose, commands, agent, body)

    server.add_tool(propose_watch, name=TOOL_NAME, description=_DESCRIPTION)
    return server


def serve_stdio(server: MCPServer) -> None:
    """Serve on stdin/stdout until the client closes them."""
    anyio.run(server.run_stdio_async)
