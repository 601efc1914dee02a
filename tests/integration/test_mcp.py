"""``vigil mcp`` as a subprocess, driven by the official SDK's stdio client, against the real
broker and command processor: one tool, and it can only propose."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.integration.api_harness import Plane, agent_watch, running_plane

pytestmark = pytest.mark.integration

VIGIL = str(Path(sys.executable).with_name("vigil"))


@pytest.fixture(scope="module")
def plane(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with running_plane(kafka_bootstrap, tmp_path_factory.mktemp("mcp")) as found:
        yield found


def server(plane: Plane, principal: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=VIGIL,
        args=["--config", str(plane.config_path), "mcp", "--principal", principal],
        # The server's own environment: its PATH and the key-encryption keys (§10).
        env={
            "PATH": os.environ.get("PATH", ""),
            "VIGIL_MASTER_KEYS": os.environ["VIGIL_MASTER_KEYS"],
        },
    )


def session(plane: Plane, principal: str, work: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(60):
            async with Client(server(plane, principal)) as client:
                return await work(client)

    return anyio.run(main)


def test_an_mcp_client_lists_exactly_one_tool_propose_watch(plane: Plane) -> None:
    async def tools(client: Client) -> list[Any]:
        return list((await client.list_tools()).tools)

    listed = session(plane, "mcp-agent", tools)
    assert [tool.name for tool in listed] == ["propose_watch"]
    schema = listed[0].input_schema
    assert {"purpose", "source", "delivery"} <= set(schema["required"])
    assert "watcher_id" in schema["properties"]  # optional: a proposal without one gets one
    assert {"window", "terminal_condition", "session_id"} <= set(schema["properties"])


def test_calling_propose_watch_creates_a_proposed_watch_never_an_active_one(plane: Plane) -> None:
    body = agent_watch("mcp-1", run="r-3")

    async def call(client: Client) -> Any:
        return await client.call_tool("propose_watch", body)

    result = session(plane, "mcp-agent", call)
    assert not result.is_error, result.content
    made = result.structured_content
    assert made is not None
    assert (made["watcher_id"], made["status"], made["session_id"]) == (
        "mcp-1",
        "proposed",
        "s-mcp",
    )
    stored = plane.call("GET", "/v1/watches/mcp-1").json()
    assert (stored["status"], stored["activated_at"]) == ("proposed", None)
    active = plane.call("GET", "/v1/watches", params={"state": "active", "session_id": "s-mcp"})
    assert active.json() == {"watchers": []}


def test_a_refused_proposal_is_a_tool_error_naming_the_code(plane: Plane) -> None:
    body = agent_watch("mcp-2", run="r-4", session="s-other")

    async def call(client: Client) -> Any:
        return await client.call_tool("propose_watch", body)

    result = session(plane, "mcp-agent", call)
    assert result.is_error
    assert "denied" in result.content[0].text
    assert plane.call("GET", "/v1/watches/mcp-2").status_code == 404


def test_vigil_mcp_refuses_to_act_as_a_non_agent_principal(plane: Plane) -> None:
    params = server(plane, "owner")
    done = subprocess.run(
        [params.command, *params.args],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "acts as an agent principal; 'owner' is user" in done.stderr
