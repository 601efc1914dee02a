"""``vigil api``: serve the HTTP API with uvicorn (DESIGN.md §9), or print its OpenAPI contract
(``--openapi``: the checked-in ``docs/openapi.json``); ``vigil mcp``: the MCP tool, its client.

Owns :func:`build_services`, the wiring from ``vigil.toml`` that ``vigil api`` and the tests
share. Leaves out the routes (``pipeline.control.http.api``) and the MCP server
(``pipeline.control.mcp.server``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.cli.daemon_cmd import host_zone
from pipeline.cli.options import verbose_option
from pipeline.cli.process import serve_health
from pipeline.clock import Clock, SystemClock
from pipeline.config import VigilConfig
from pipeline.control.core import Dispatcher, Subjecthood
from pipeline.control.http.api import ApiServices, SchedulePort, create_app
from pipeline.control.http.auth import TokenDirectory
from pipeline.control.http.backend import LedgerStore
from pipeline.control.http.limits import RateLimiter
from pipeline.control.http.metrics import RequestMetrics
from pipeline.control.http.pool import ClientPool
from pipeline.control.http.wake_reader import KafkaWakes
from pipeline.control.run import RunStarted
from pipeline.control.status import StatusReader
from pipeline.crypto import KeyEncryptionKeys, generate_kek_text
from pipeline.records.event import EventLine
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.authz import Principal, Role
from pipeline.rules.errors import BrokerError, ConfigError, DefinitionError
from producers.publish.publisher import EventPublisher

__all__ = ["api", "build_services", "mcp", "openapi_document"]

_POOL: Final = 4
API_URL_ENV: Final = "VIGIL_API_URL"
API_TOKEN_ENV: Final = "VIGIL_API_TOKEN"
_CLOSE_FLUSH_S: Final = 10.0  # what a stopping API still waits for


class _NotOverHttp:
    """The agent and script ports of a dispatch core that serves only list and cancel."""

    def ask(self, text: str, chat: str) -> str:
        raise ConfigError("agents are started by `vigil daemon`, not over HTTP")

    def check(self, args: Sequence[str]) -> Any:
        raise ConfigError("scripts are started by `vigil daemon`, not over HTTP")

    def start(
        self,
        args: Sequence[str],
        *,
        chat: str,
        delivery_key: str,
        schedule_name: str | None = None,
        schedule_time: datetime | None = None,
    ) -> RunStarted:
        raise ConfigError("scripts are started by `vigil daemon`, not over HTTP")


class SdkEvents:
    """``POST /v1/events`` through the publisher SDK: one :class:`EventPublisher`, one batch at
    a time (the SDK's producer is not shared between batches' flushes)."""

    def __init__(self, config: VigilConfig) -> None:
        self._publisher = EventPublisher(config)
        self._lock = threading.Lock()

    def publish(
        self, events: Sequence[tuple[EventLine, datetime]], tenant_id: str
    ) -> list[str | None]:
        verdicts: list[str | None] = []
        with self._lock:
            for line, observed_at in events:
                try:
                    self._publisher.publish_line(line, observed_at, tenant_id)
                except DefinitionError as exc:
                    verdicts.append(str(exc))
                    continue
                verdicts.append(None)
            # Up to the SDK's timeout, a leader move's worth: unacknowledged by then is a 503.
            self._publisher.flush()
        return verdicts

    def close(self) -> None:
        with contextlib.suppress(BrokerError):
            self._publisher.flush(_CLOSE_FLUSH_S)


def build_services(
    config: VigilConfig,
    *,
    clock: Clock | None = None,
    pool_size: int | None = None,
    keks: KeyEncryptionKeys | None = None,
) -> tuple[ApiServices, Callable[[], None]]:
    """The API's services from ``config``, and what closes them (``keks``: default from
    ``[privacy]``; none configured is a ``ConfigError``)."""
    clock = clock or SystemClock()
    topology = config.kafka.topology()
    bootstrap = config.kafka.bootstrap_servers
    keks = keks or config.privacy.keks()
    api = config.api
    commands = ClientPool(
        bootstrap,
        topology,
        size=pool_size or api.command_clients,
        wait_s=api.command_wait.total_seconds(),
        keks=keks,
    )
    ledger = LedgerStore(
        bootstrap,
        topology,
        clock,
        max_scan=api.max_scan,
        keks=keks,
        per_subject=api.index_per_subject,
        max_records=api.index_records,
    )
    chats = tuple(config.chats)
    schedules = _schedules(config, commands, clock)
    events = SdkEvents(config)
    budgets = RedisBudgets.from_url(config.redis.url.get_secret_value())
    services = ApiServices(
        tokens=TokenDirectory.from_config(config.principals),
        commands=commands,
        ledger=ledger,
        schedules=schedules,
        chats=chats,
        clock=clock,
        max_body=config.api.max_body,
        events=events,
        wakes=KafkaWakes(bootstrap, topology),
        publishers=_publishers(config),
        status=StatusReader(bootstrap, topology, clock, budgets),
        limiter=RateLimiter(api.rate, api.burst),
        sign_ins=RateLimiter(api.sign_in_per_minute / 60.0, api.sign_in_per_minute),
        sessions_per_principal=api.sessions_per_principal,
        secure_cookie=api.secure_cookie,
    )

    def close() -> None:
        commands.close()
        ledger.close()
        events.close()
        budgets.close()

    return services, close


def _schedules(
    config: VigilConfig, commands: ClientPool, clock: Clock
) -> Callable[[Principal], SchedulePort]:
    """A dispatch core per caller that serves only ``list`` and ``cancel`` of schedules (the
    verbs that start agents or scripts are the daemon's)."""
    zone = host_zone(config.subject.timezone)
    chats = tuple(config.chats)
    not_here = _NotOverHttp()

    def schedules(who: Principal) -> SchedulePort:
        subject = Subjecthood(who.tenant_id, who.user_id, chats, zone)
        return Dispatcher(subject, commands=commands, agent=not_here, runner=not_here, clock=clock)

    return schedules


def _publishers(config: VigilConfig) -> dict[str, frozenset[str]]:
    """The sources each ``publisher`` principal may publish to."""
    return {
        name: frozenset(p.sources)
        for name, p in config.principals.items()
        if p.role is Role.PUBLISHER
    }


def openapi_document() -> dict[str, Any]:
    """The served contract; it depends on no configuration."""
    # No record is read or written: a throwaway key-encryption key will do.
    keks = KeyEncryptionKeys.parse(generate_kek_text("openapi"))
    services, close = build_services(VigilConfig(), pool_size=1, keks=keks)
    try:
        return create_app(services).openapi()
    finally:
        close()


@click.command()
@click.option("--listen", help="host:port to serve (default: [api] listen; port 0 picks one).")
@click.option("--openapi", "print_openapi", is_flag=True, help="Print the OpenAPI document.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning"]),
    default="info",
    show_default=True,
)
@verbose_option
@pass_state
def api(state: CliState, listen: str | None, print_openapi: bool, log_level: str) -> None:
    """Serve the HTTP API: watches, agent-watch governance, the in-app ledger, grants.

    Callers authenticate with a bearer token configured under [principals.NAME] (its
    token_sha256) and send Vigil-Protocol-Version: 1. Needs the command processor.

    \b
    Example:
      vigil api --listen 127.0.0.1:8088
      curl -H 'Authorization: Bearer …' -H 'Vigil-Protocol-Version: 1' \\
           http://127.0.0.1:8088/v1/watches
    """
    if print_openapi:
        click.echo(json.dumps(openapi_document(), indent=2, sort_keys=True))
        return
    import uvicorn

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    config: VigilConfig = state.config
    host, _, port = (listen or config.api.listen).rpartition(":")
    if not config.principals:
        click.echo("warning: no [principals] are configured: every request will be 401", err=True)
    keks = config.privacy.keks()  # first: a missing KEK is one line and no broker round trip
    state.reach_kafka()
    services, close = build_services(config, keks=keks)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), int(port)))
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc}") from None
    bound = sock.getsockname()
    click.echo(f"vigil api listening on http://{host}:{bound[1]}", err=True)
    app = create_app(services)
    app.add_middleware(RequestMetrics)
    server = _quiet_exit_server(uvicorn.Config(app, log_level=log_level))
    health = serve_health(config, "api", config.instance.resolved_id())
    health.add("api", lambda: services.ledger.ready())
    health.add("http", lambda: None if server.started else "starting: not serving HTTP yet")
    try:
        server.run(sockets=[sock])
    finally:
        health.close()
        close()
        sock.close()
        click.echo("vigil api stopped", err=True)


@click.command()
@click.option(
    "--api",
    "api_url",
    envvar=API_URL_ENV,
    help="The vigil HTTP API (default: $VIGIL_API_URL, else [api] listen of vigil.toml).",
)
@click.option(
    "--token-file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A file holding the agent's bearer token (default: $VIGIL_API_TOKEN).",
)
@pass_state
def mcp(state: CliState, api_url: str | None, token_file: Path | None) -> None:
    """Serve the MCP tool `propose_watch` on stdin/stdout: a client of the HTTP API.

    The one tool proposes (POST /v1/watches:propose) with the agent's own bearer token; it never
    approves, lists or cancels, and holds no key or Kafka access. Needs `vigil api`.

    \b
    Example (an MCP client's server entry):
      {"command": "vigil", "args": ["mcp", "--api", "http://127.0.0.1:8088"],
       "env": {"VIGIL_API_TOKEN": "<the agent principal's token>"}}
    """
    from pipeline.control.mcp.server import ApiProposer, build_server, serve_stdio

    token = _agent_token(token_file)
    url = api_url or f"http://{state.config.api.listen}"
    serve_stdio(build_server(ApiProposer(url, token)))


def _agent_token(token_file: Path | None) -> str:
    """The bearer token: ``--token-file``'s first line, else ``$VIGIL_API_TOKEN``."""
    if token_file is not None:
        token = token_file.read_text(encoding="utf-8").strip()
    else:
        token = os.environ.get(API_TOKEN_ENV, "").strip()
    if not token:
        raise ConfigError(
            f"vigil mcp needs the agent's API token: set ${API_TOKEN_ENV} or --token-file"
        )
    return token


def _quiet_exit_server(config: Any) -> Any:
    """A uvicorn server that stops gracefully on SIGTERM/SIGINT and then exits 0, instead of
    raising the signal again once stopped (uvicorn's default: the exit status would be -15)."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            handled = (signal.SIGINT, signal.SIGTERM)
            originals = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in originals.items():
                    signal.signal(sig, handler)

    return Server(config)
