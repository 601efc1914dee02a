"""``vigil daemon``: serve the control plane on a local Unix socket until SIGTERM.

Wires the pieces at the edge: the socket path (``--socket`` → ``$VIGIL_SOCKET`` →
``[rpc] socket_path`` → ``$XDG_RUNTIME_DIR/vigil.sock`` → ``~/.config/vigil/vigil.sock``), the
subject's zone (``[subject] timezone``, else the host's), the command client (immediate sends
are commands too: the command processor writes their outbox entries), the agent runner with its
tokens, the script runner and the :class:`Dispatcher`. Every peer of the socket is our own user
(``SO_PEERCRED``); a request bearing a live agent token — or sent from inside an agent process
this daemon started — acts with the agent role. At start the daemon ensures, in the background
and idempotently, the one grant its verbs need (``vigil grant list`` shows it; revoking it locks
the verbs).

Left out: the verbs' meaning (``pipeline.control.core``) and the framing
(``pipeline.control.socket.server``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo

import click

from pipeline.cli import shutdown
from pipeline.cli.context import CliState, pass_state
from pipeline.clock import SystemClock
from pipeline.config import VigilConfig
from pipeline.control.agent import AgentRunner, AgentTokens
from pipeline.control.client import CommandClient, operator_principal
from pipeline.control.core import Dispatcher, Subjecthood, user_principal
from pipeline.control.run import ScriptRunner
from pipeline.control.socket.server import (
    Handler,
    Peer,
    SocketServer,
    default_socket_path,
    process_ancestry,
)
from pipeline.control.verbs import ErrorKind, VerbResponse
from pipeline.rules.authz import Principal
from pipeline.rules.commands.immediate import daemon_grant
from pipeline.rules.commands.model import CommandVerb
from pipeline.rules.errors import DefinitionError, VigilError
from pipeline.rules.zones import load_zone

__all__ = ["daemon", "ensure_grant", "host_zone"]

log = logging.getLogger(__name__)

_GRANT_RETRY_S: Final = 2.0


def host_zone(configured: str | None, environ: dict[str, str] | None = None) -> ZoneInfo:
    """``[subject] timezone``, else the host's IANA zone (``$TZ``, ``/etc/timezone``, the
    ``/etc/localtime`` link), else UTC."""
    env = os.environ if environ is None else environ
    candidates = [configured] if configured else []
    candidates.append(env.get("TZ", "").lstrip(":"))
    with contextlib.suppress(OSError):
        candidates.append(Path("/etc/timezone").read_text().strip())
    try:
        target = os.readlink("/etc/localtime")
        if "zoneinfo/" in target:
            candidates.append(target.split("zoneinfo/", 1)[1])
    except OSError:
        pass
    for name in candidates:
        if not name:
            continue
        try:
            return load_zone(name)
        except DefinitionError:
            if name == configured:
                raise
    return load_zone("UTC")


def ensure_grant(client: CommandClient, config: VigilConfig, stop: threading.Event) -> None:
    """Add the daemon's grant once the command processor answers; retry until it does."""
    subject = config.subject
    request_id, spec = daemon_grant(subject.tenant_id, subject.user_id, config.chats)
    operator = operator_principal(subject.tenant_id, subject.user_id)
    warned = False
    while not stop.is_set():
        command = client.command(
            CommandVerb.GRANT_ADD, operator, subject.tenant_id, subject.user_id, grant=spec
        )
        command = command.model_copy(update={"request_id": request_id})
        try:
            result = client.send(command)
        except VigilError as exc:
            if not warned:
                log.warning("cannot ensure the control grant yet (retrying): %s", exc)
                warned = True
            stop.wait(_GRANT_RETRY_S)
            continue
        if result.ok:
            log.info("control grant %s ensured", (result.result or {}).get("grant_id"))
        else:
            log.error("the control grant was refused: %s", result.error)
        return


def _handler(dispatcher: Dispatcher, tokens: AgentTokens, user: Principal) -> Handler:
    def handle(body: object, peer: Peer) -> VerbResponse:
        principal = user
        run = tokens.by_pid(process_ancestry(peer.pid))
        token = body.get("token") if isinstance(body, dict) else None
        if token is not None:
            by_token = tokens.by_token(str(token))
            if by_token is None:
                return VerbResponse.failure(
                    ErrorKind.UNAUTHENTICATED, "unknown or expired agent token"
                )
            run = by_token
        if run is not None:
            principal = run.principal
        return dispatcher.handle(body, principal)

    return handle


@click.command()
@click.option(
    "--socket",
    "socket_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Socket to serve (default: $VIGIL_SOCKET, [rpc] socket_path, "
    "$XDG_RUNTIME_DIR/vigil.sock, ~/.config/vigil/vigil.sock).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning"]),
    default="info",
    show_default=True,
    help="debug also logs what `run` scripts print.",
)
@pass_state
def daemon(state: CliState, socket_path: Path | None, log_level: str) -> None:
    """Serve the control plane: the verbs `vigil send|prompt|query|run|schedule|list|cancel`.

    Listens on a Unix socket (mode 0600) that only your user can use; refuses to start when
    another daemon already serves it. Needs the command processor for schedules and sends, and the
    delivery consumer to deliver.

    \b
    Example:
      vigil daemon --socket /tmp/vigil.sock &
      vigil send --socket /tmp/vigil.sock "deploy finished"
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    config: VigilConfig = state.config
    path = default_socket_path(socket_path, config.rpc.socket_path)
    subject = config.subject
    topology = config.kafka.topology()
    bootstrap = config.kafka.bootstrap_servers
    tokens = AgentTokens(subject.tenant_id, subject.user_id)
    who = Subjecthood(
        tenant_id=subject.tenant_id,
        user_id=subject.user_id,
        chats=tuple(config.chats),
        zone=host_zone(subject.timezone),
    )
    keks = config.privacy.keks()
    commands = CommandClient(bootstrap, topology, keks=keks)
    dispatcher = Dispatcher(
        who,
        commands=commands,
        agent=AgentRunner(config.agent.command, config.agent.timeout, path, tokens),
        runner=ScriptRunner(config.run.allow_dir, path),
        clock=SystemClock(),
    )
    server = SocketServer(
        path, _handler(dispatcher, tokens, user_principal(subject.tenant_id, subject.user_id))
    )
    server.start()
    stop = shutdown.catch()
    granter = CommandClient(bootstrap, topology, keks=keks)
    grant_thread = threading.Thread(
        target=ensure_grant, args=(granter, config, stop), name="control-grant", daemon=True
    )
    grant_thread.start()
    click.echo(f"vigil daemon listening on {path}", err=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.close()
        grant_thread.join(5.0)
        granter.close()
        commands.close()
        click.echo("vigil daemon stopped", err=True)
