"""``vigil daemon``: serve the control plane on a local Unix socket until SIGTERM.

Owns the wiring at the edge: the socket path, the subject's zone (:func:`host_zone`), the
dispatcher and who a peer is, the chats read (inboxes in ``<state dir>/chats``) and the daemon's
grant ensured in the background (:func:`ensure_grant`; until then verbs answer ``starting``).
Leaves out the verbs' meaning (``pipeline.control.core``) and the framing (``socket.server``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo

import click
from prometheus_client import Counter

from pipeline.cli import shutdown
from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import verbose_option
from pipeline.cli.process import serve_health
from pipeline.clock import SystemClock
from pipeline.config import VigilConfig
from pipeline.control.agent import AgentRunner, AgentTokens
from pipeline.control.chat.ingress import ChatIngress, listening_bots
from pipeline.control.client import CommandClient, operator_principal
from pipeline.control.core import Dispatcher, Subjecthood, user_principal
from pipeline.control.identity import PeerIdentity
from pipeline.control.isolation import AgentUser, agent_socket_path, can_switch_user
from pipeline.control.run import ScriptRunner
from pipeline.control.skill import skill_path
from pipeline.control.socket.server import Handler, Peer, SocketServer, default_socket_path
from pipeline.control.verbs import VerbErrorKind, VerbName, VerbResponse
from pipeline.crypto import KeyEncryptionKeys
from pipeline.ops.health import state_dir
from pipeline.rules.commands.immediate import daemon_grant
from pipeline.rules.commands.model import CommandVerb
from pipeline.rules.errors import ConfigError, DefinitionError, VigilError
from pipeline.rules.zones import load_zone

__all__ = ["BEST_EFFORT", "SAME_UID", "daemon", "ensure_grant", "host_zone"]

log = logging.getLogger(__name__)

_GRANT_RETRY_S: Final = 2.0
STARTING: Final = "the vigil daemon is starting: its control grant is not in place yet"
UNAUTHENTICATED: Final = (
    "an unknown or expired agent token, or a peer process gone or replaced since it connected"
)
_VERBS: Final = frozenset(v.value for v in VerbName)
_REQUESTS: Final = Counter(
    "vigil_daemon_requests",
    "Requests on the daemon's socket by verb and result (ok, or the error code).",
    ["verb", "result"],
)
SAME_UID: Final = (
    "[agent] command would run under the daemon's own uid, where it can read vigil.toml and key "
    'files and act as you: set [agent] run_as = "USER" (a user of its own), or '
    "[agent] allow_same_uid = true to accept that risk (vigil dev does)"
)
BEST_EFFORT: Final = (
    "agent isolation is by process ancestry only (best effort): a process an agent starts that "
    "drops its token, calls setsid and double-forks acts as you; set [agent] run_as to run "
    "agents under their own uid"
)


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


def ensure_grant(
    client: CommandClient,
    config: VigilConfig,
    stop: threading.Event,
    ready: threading.Event | None = None,
) -> None:
    """Add the daemon's grant once the command processor answers; retry until it does. Sets
    ``ready`` once the command processor has answered (verbs are served from then on)."""
    subject = config.subject
    request_id, spec = daemon_grant(subject.tenant_id, subject.user_id, config.chats)
    operator = operator_principal(
        subject.tenant_id, subject.user_id, name=f"daemon:{subject.tenant_id}/{subject.user_id}"
    )
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
        if ready is not None:
            ready.set()
        return


def _handler(
    dispatcher: Dispatcher, identity: PeerIdentity, ready: threading.Event | None = None
) -> Handler:
    def handle(body: object, peer: Peer) -> VerbResponse:
        response = answer(body, peer)
        verb = body.get("verb") if isinstance(body, dict) else None
        label = verb if verb in _VERBS else "other"
        result = "ok" if response.error is None else response.error.code.value
        _REQUESTS.labels(label, result).inc()
        return response

    def answer(body: object, peer: Peer) -> VerbResponse:
        token = body.get("token") if isinstance(body, dict) else None
        principal = identity.of(peer, token)
        if principal is None:
            return VerbResponse.failure(VerbErrorKind.UNAUTHENTICATED, UNAUTHENTICATED)
        if ready is not None and not ready.is_set():
            return VerbResponse.failure(VerbErrorKind.STARTING, STARTING)
        return dispatcher.handle(body, principal)

    return handle


def _agent_user(config: VigilConfig) -> AgentUser | None:
    """``[agent] run_as``, checked: the user exists, is not us, and we may switch to it. An
    agent under our own uid is refused unless ``[agent] allow_same_uid`` says so (vigil dev)."""
    if not config.agent.command:
        return None  # no agent: nobody to run as
    if config.agent.run_as is None:
        if not config.agent.allow_same_uid:
            raise ConfigError(SAME_UID)
        return None
    user = AgentUser.resolve(config.agent.run_as)
    if not can_switch_user():
        raise ConfigError(
            f"[agent] run_as = {user.name!r} needs a daemon that may switch users: run it as "
            "root or with CAP_SETUID, CAP_SETGID and CAP_CHOWN"
        )
    return user


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
@verbose_option
@pass_state
def daemon(state: CliState, socket_path: Path | None, log_level: str) -> None:
    """Serve the control plane: the verbs `vigil send|prompt|query|run|schedule|list|cancel`.

    Listens on a Unix socket (mode 0600) that only your user can use; refuses to start when
    another daemon already serves it. Needs the command processor for schedules and sends, and the
    delivery consumer to deliver. Reads every Telegram chat with `listen` (the default): each
    message written there is a turn of that chat's conversation with the agent.

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
    tokens = AgentTokens(subject.tenant_id, subject.user_id)
    agent_user = _agent_user(config)
    agent_path = (
        path if agent_user is None else agent_socket_path(config.agent.socket_path, agent_user)
    )
    zone = host_zone(subject.timezone)
    who = Subjecthood(subject.tenant_id, subject.user_id, tuple(config.chats), zone)
    keks = config.privacy.keks()  # first: a missing KEK is one line and no broker round trip
    bots = listening_bots(
        config, state_dir(configured=config.instance.state_dir) / "chats", os.environ
    )
    state.reach_kafka()
    commands = CommandClient(config.kafka.bootstrap_servers, config.kafka.topology(), keks=keks)
    dispatcher = _dispatcher(config, who, commands, tokens, path, agent_path, agent_user)
    ready = threading.Event()
    handler = _handler(dispatcher, _peer_identity(config, tokens, agent_user), ready)
    servers = _serve_sockets(config, handler, path, agent_path, agent_user)
    _say_how_agents_run(agent_user, agent_path)
    stop = shutdown.catch()
    ingress = ChatIngress(bots, dispatcher, ready, stop)
    ingress.start()
    granter, grant_thread = _ensure_grant_in_background(config, keks, stop, ready)
    health = serve_health(config, "daemon", config.instance.resolved_id())
    health.add("control_grant", lambda: None if ready.is_set() else f"starting: {STARTING}")
    click.echo(f"vigil daemon listening on {path}", err=True)
    try:
        while not stop.wait(0.1):
            pass
    finally:
        for server in servers:
            server.close()
        ingress.close()
        health.close()
        # Stop within a second: a grant still being ensured is retried by the next start (it is
        # idempotent), so its thread is not waited for, nor its client closed under it.
        grant_thread.join(0.2)
        if not grant_thread.is_alive():
            granter.close()
        commands.close()
        click.echo("vigil daemon stopped", err=True)


def _dispatcher(
    config: VigilConfig,
    who: Subjecthood,
    commands: CommandClient,
    tokens: AgentTokens,
    path: Path,
    agent_path: Path,
    agent_user: AgentUser | None,
) -> Dispatcher:
    """The verbs' core: commands through ``commands``, the agent (reaching the daemon on
    ``agent_path``) and the script runner (on ``path``)."""
    return Dispatcher(
        who,
        commands=commands,
        agent=AgentRunner(
            config.agent.command,
            config.agent.timeout,
            agent_path,
            tokens,
            pass_env=config.agent.env,
            user=agent_user,
            skill=skill_path(config.agent.skill),
            max_output=config.limits.agent_output,
        ),
        runner=ScriptRunner(config.run.allow_dir, path, pass_env=config.run.env),
        clock=SystemClock(),
    )


def _peer_identity(
    config: VigilConfig, tokens: AgentTokens, agent_user: AgentUser | None
) -> PeerIdentity:
    """Who a peer is: the configured user, unless it is an agent (a token, an agent run's
    descendant, or ``[agent] run_as``'s uid).

    Our own uid (``SO_PEERCRED``) is the configured user unless it bears a live agent token or
    descends from an agent run; with ``[agent] run_as`` the agent runs under that user's uid,
    reaches the daemon on a socket of its own and is the agent whatever it forks. Without ``run_as``
    an agent is refused unless ``[agent] allow_same_uid`` opts in (``vigil dev`` does), and the
    daemon warns at start that agent isolation is by process ancestry only. Agents and scripts get
    an allowlisted environment.
    """
    subject = config.subject
    return PeerIdentity(
        user_principal(subject.tenant_id, subject.user_id),
        tokens,
        None if agent_user is None else agent_user.uid,
    )


def _serve_sockets(
    config: VigilConfig,
    handler: Handler,
    path: Path,
    agent_path: Path,
    agent_user: AgentUser | None,
) -> list[SocketServer]:
    """The daemon's socket, and with ``[agent] run_as`` the agent's own one; both serving."""
    served = functools.partial(
        SocketServer,
        handler=handler,
        max_connections=config.limits.socket_connections,
        idle_s=config.limits.socket_idle.total_seconds(),
    )
    servers = [served(path)]
    if agent_user is not None:
        servers.append(
            served(
                agent_path,
                owner=agent_user.uid,
                peers={agent_user.uid},
                remove_dir=config.agent.socket_path is None,  # a fresh private directory
            )
        )
    for server in servers:
        server.start()
    return servers


def _say_how_agents_run(agent_user: AgentUser | None, agent_path: Path) -> None:
    if agent_user is None:
        log.warning(BEST_EFFORT)
        click.echo(f"warning: {BEST_EFFORT}", err=True)
    else:
        click.echo(
            f"agents run as {agent_user.name} (uid {agent_user.uid}) on {agent_path}", err=True
        )


def _ensure_grant_in_background(
    config: VigilConfig, keks: KeyEncryptionKeys, stop: threading.Event, ready: threading.Event
) -> tuple[CommandClient, threading.Thread]:
    """:func:`ensure_grant` on a thread of its own, with a client of its own."""
    granter = CommandClient(config.kafka.bootstrap_servers, config.kafka.topology(), keks=keks)
    thread = threading.Thread(
        target=ensure_grant, args=(granter, config, stop, ready), name="control-grant", daemon=True
    )
    thread.start()
    return granter, thread
