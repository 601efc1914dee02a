"""A real control plane for the API tests: fresh topics, a command processor in a thread, and
``vigil api``'s app served by uvicorn on 127.0.0.1 (a free port), with configured principals.

Nothing is faked: commands go through the broker to the processor and back.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from prometheus_client import CollectorRegistry

from consumers.commands import CommandDeps, CommandProcessor, CommandSettings
from pipeline.cli.api_cmd import build_services
from pipeline.config import VigilConfig, parse_config
from pipeline.control.http.api import create_app
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.topics import Topology
from tests.names import fresh

PARTITIONS = 2
TENANT, USER = "acme", "u-1"
RUNS = tuple(f"r-{n}" for n in range(12))

# name → (role, tenant, user, session)
PRINCIPALS: dict[str, tuple[str, str, str, str | None]] = {
    "owner": ("user", TENANT, USER, None),
    "manager": ("manager", TENANT, "m-1", None),
    "operator": ("operator", TENANT, "ops", None),
    "agent": ("agent", TENANT, USER, "s-a"),
    "racer": ("agent", TENANT, USER, "s-race"),
    "mcp-agent": ("agent", TENANT, USER, "s-mcp"),
    "chat": ("scoped_chat", TENANT, USER, "s-a"),
    "stranger": ("user", "globex", USER, None),
}


def token_of(name: str) -> str:
    return f"token-{name}-{'x' * 8}"


def principals_table() -> dict[str, dict[str, Any]]:
    table = {}
    for name, (role, tenant, user, session) in PRINCIPALS.items():
        entry: dict[str, Any] = {
            "token_sha256": hashlib.sha256(token_of(name).encode()).hexdigest(),
            "role": role,
            "tenant_id": tenant,
            "user_id": user,
        }
        if session is not None:
            entry["session_id"] = session
        table[name] = entry
    return table


def config_data(bootstrap: str, prefix: str) -> dict[str, Any]:
    return {
        "kafka": {"bootstrap_servers": bootstrap, "topic_prefix": prefix, "partitions": PARTITIONS},
        "subject": {"tenant_id": TENANT, "user_id": USER, "timezone": "UTC"},
        "chats": {"me": {"kind": "console"}},
        "principals": principals_table(),
        # The property runs fire thousands of requests as one principal: no rate limit here
        # (test_api_edge holds the limit itself).
        "api": {"rate": 100_000, "burst": 1_000_000, "sign_in_per_minute": 10_000},
    }


def config_toml(data: dict[str, Any]) -> str:
    """The few TOML shapes :func:`config_data` uses (strings, ints, nested tables)."""
    lines: list[str] = []

    def table(path: str, body: dict[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, dict)}
        if path:
            lines.append(f"[{path}]")
        for key, value in scalars.items():
            lines.append(f"{key} = {value!r}" if isinstance(value, int) else f'{key} = "{value}"')
        for key, value in body.items():
            if isinstance(value, dict):
                table(f"{path}.{key}" if path else key, value)

    table("", data)
    return "\n".join(lines) + "\n"


def agent_watch(
    watcher_id: str, *, run: str = "r-0", session: str | None = None, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "watcher_id": watcher_id,
        "purpose": "agent.watch",
        "mode": "once",
        "source": {
            "kind": "polling",
            "source_id": f"run:{run}",
            "tool": "workflow.run.status@v1",
            "target": run,
            "cadence": "5m",
            "max_age": "2m",
        },
        "condition": {"eq": ["status", "succeeded"]},
        "terminal_condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "in-app"},
        "window": "1h",
    }
    if session is not None:
        body["session_id"] = session
    body.update(extra)
    return body


def event_watch(watcher_id: str, **extra: Any) -> dict[str, Any]:
    """A plain event watcher (purpose ``ops.alert`` on ``ci.pipeline``, target ``ops-hook``)."""
    body: dict[str, Any] = {
        "watcher_id": watcher_id,
        "purpose": "ops.alert",
        "source": {
            "kind": "event",
            "source_id": "ci.pipeline",
            "event_type": "build.finished",
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "ops-hook"},
        "expires_at": "2099-01-01T00:00:00Z",
    }
    body.update(extra)
    return body


class ProcessorThread:
    def __init__(self, bootstrap: str, topology: Topology) -> None:
        self.processor = CommandProcessor(
            CommandSettings(
                bootstrap,
                topology,
                instance_id=f"api-{uuid.uuid4().hex[:6]}",
                consumer_overrides={
                    "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": 500,
                    "fetch.wait.max.ms": 10,
                },
            ),
            CommandDeps(metrics_registry=CollectorRegistry()),
        )
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="command-processor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.processor.run(self._stop)
        except BaseException as exc:
            self.failures.append(exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the processor did not stop"
        assert not self.failures, self.failures


@dataclass
class Plane:
    """The served API and what is behind it."""

    base_url: str
    bootstrap: str
    topology: Topology
    config: VigilConfig
    config_path: Path
    http: httpx.Client = field(repr=False)

    def call(
        self,
        method: str,
        path: str,
        who: str | None = "owner",
        *,
        protocol: str | None = "1",
        **kwargs: Any,
    ) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        if who is not None:
            headers["Authorization"] = f"Bearer {token_of(who)}"
        if protocol is not None:
            headers["Vigil-Protocol-Version"] = protocol
        return self.http.request(method, path, headers=headers, **kwargs)

    def grant(self, **body: Any) -> str:
        until = (datetime.now(UTC) + timedelta(days=1)).isoformat().replace("+00:00", "Z")
        answer = self.call("POST", "/v1/grants", "operator", json={"until": until, **body})
        assert answer.status_code == 201, answer.text
        return str(answer.json()["grant_id"])


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """``app`` on uvicorn in a thread, on a free port of 127.0.0.1; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        assert thread.is_alive(), "uvicorn exited"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def running_plane(bootstrap: str, tmp: Path) -> Iterator[Plane]:
    prefix = fresh("t-api") + "."
    data = config_data(bootstrap, prefix)
    config = parse_config(data)
    topology = config.kafka.topology()
    ensure_topics(connect_admin(bootstrap), topology)
    path = tmp / "vigil.toml"
    path.write_text(config_toml(data), encoding="utf-8")
    processor = ProcessorThread(bootstrap, topology)
    services, close = build_services(config, pool_size=6)
    try:
        with (
            serve(create_app(services)) as url,
            httpx.Client(base_url=url, timeout=60) as http,
        ):
            plane = Plane(url, bootstrap, topology, config, path, http)
            deadline = time.monotonic() + 60  # ready once the ledger index has read the log
            while http.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "the API did not get ready"
                time.sleep(0.1)
            plane.grant(
                tenant_id=TENANT,
                user_id=USER,
                purpose="agent.watch",
                sources=[f"run:{run}" for run in RUNS],
                tools=["workflow.run.status@v1"],
                targets=["in-app"],
                actions=["propose", "approve", "manage"],
            )
            yield plane
    finally:
        close()
        processor.stop()
