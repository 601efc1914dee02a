"""``vigil mcp`` as a subprocess, driven by the official SDK's stdio client, against the real
HTTP API, broker and command processor: one tool, and it can only propose, as the agent whose
bearer token it holds — no key-encryption key and no Kafka connection in its process."""

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

from tests.integration.api_harness import Plane, agent_watch, running_plane, token_of

pytestmark = pytest.mark.integration

VIGIL = str(Path(sys.executable).with_name("vigil"))


@pytest.fixture(scope="module")
def plane(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with running_plane(kafka_bootstrap, tmp_path_factory.mktemp("mcp")) as found:
        yield found


def server(plane: Plane, principal: str, pid_file: Path | None = None) -> StdioServerParameters:
    """``vigil mcp`` for the API of ``plane`` with ``principal``'s token, and nothing else: no
    vigil.toml, no key (DESIGN.md §10). With ``pid_file`` its pid is written there."""
    command = [VIGIL, "mcp", "--api", plane.base_url]
    if pid_file is not None:
        command = ["/bin/sh", "-c", f'echo $$ > {pid_file}; exec "$@"', "mcp", *command]
    return StdioServerParameters(
        command=command[0],
        args=command[1:],
        env={"PATH": os.environ.get("PATH", ""), "VIGIL_API_TOKEN": token_of(principal)},
    )


def session(plane: Plane, principal: str, work: Any, pid_file: Path | None = None) -> Any:
    async def main() -> Any:
        with anyio.fail_after(60):
            async with Client(server(plane, principal, pid_file)) as client:
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


def test_a_user_token_through_mcp_still_only_proposes(plane: Plane) -> None:
    """No principal is chosen by name: the token decides who asks, and the tool only proposes."""
    body = agent_watch("mcp-3", run="r-3", session="s-owner")

    async def call(client: Client) -> Any:
        return await client.call_tool("propose_watch", body)

    result = session(plane, "owner", call)
    assert not result.is_error, result.content
    assert plane.call("GET", "/v1/watches/mcp-3").json()["status"] == "proposed"


def test_vigil_mcp_holds_no_key_and_no_kafka_connection(plane: Plane, tmp_path: Path) -> None:
    pid_file = tmp_path / "mcp.pid"
    body = agent_watch("mcp-4", run="r-4")
    broker_port = int(plane.bootstrap.rsplit(":", 1)[1])

    async def call(client: Client) -> Any:
        result = await client.call_tool("propose_watch", body)
        pid = int(pid_file.read_text())
        return result, _environment(pid), _kafka_sockets(pid, broker_port), _files(pid)

    result, environment, kafka, files = session(plane, "mcp-agent", call, pid_file)
    assert not result.is_error, result.content
    # The SDK adds a few plain variables (HOME, PWD, …); never a key or a Kafka setting.
    assert "VIGIL_API_TOKEN" in environment, environment
    assert not [n for n in environment if "MASTER_KEY" in n or n.startswith("VIGIL_KAFKA")]
    assert kafka == []
    assert not [f for f in files if "vigil.toml" in f or "key" in f], files


def test_vigil_mcp_without_a_token_says_how_to_give_one(plane: Plane) -> None:
    done = subprocess.run(
        [VIGIL, "mcp", "--api", plane.base_url],
        input="",
        env={"PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "VIGIL_API_TOKEN" in done.stderr


def _environment(pid: int) -> list[str]:
    """The names in ``pid``'s environment (we may read it: the test runs as root or its uid)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return [entry.split(b"=", 1)[0].decode() for entry in raw.split(b"\0") if b"=" in entry]


def _files(pid: int) -> list[str]:
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found.append(os.readlink(fd))
        except OSError:
            continue
    return found


def _kafka_sockets(pid: int, port: int) -> list[str]:
    """``pid``'s TCP sockets connected to ``port`` (the broker's)."""
    inodes = {f[8:-1] for f in _files(pid) if f.startswith("socket:[")}
    hits = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[9] in inodes:
                hits.append(line)
    return hits
