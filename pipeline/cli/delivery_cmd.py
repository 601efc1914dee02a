"""``vigil delivery``: run one member of the delivery consumer group until SIGTERM.

Reads ``[kafka]``, ``[redis]``, ``[destinations.*]``, ``[chats.*]``, ``[budgets.defaults]``,
``[instance]``, ``[metrics]``, ``[subject]`` and ``[rpc]`` (the daemon's socket, for its subject's
fired ``prompt`` and ``run``); refuses drifted topics or an unset destination secret. On SIGTERM it
stops claiming, waits (bounded) for sends in flight, commits and leaves; the rest is resent by the
next owner. Left out: the loop and adapters (``consumers.delivery``)."""

from __future__ import annotations

from pathlib import Path

import click

from consumers.delivery.adapters import build_adapters
from consumers.delivery.adapters.verbs import SocketAgent, SocketRunner, VerbExecutor
from consumers.delivery.loop import DeliveryDeps, DeliverySettings, DeliveryWorker
from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import group_protocol_option, log_level_option
from pipeline.cli.process import run_stage, start
from pipeline.control.socket.server import default_socket_path
from pipeline.crypto import KeyRing
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic
from pipeline.rules.commands.host import Host

__all__ = ["delivery"]

_TOPICS = (
    Topic.OUTBOX,
    Topic.DELIVERY_STATE,
    Topic.REDELIVERIES,
    Topic.LIFECYCLE,
    Topic.GRANTS,
    Topic.NOTIFICATIONS,
    Topic.DEAD_LETTER,
    Topic.SCHEMAS,
    Topic.KEYS,
)


@click.command()
@click.option("--instance", help="Stable instance id (default: [instance] id, then the host name).")
@click.option("--group", help="Consumer group id (default: <[instance] namespace>.delivery).")
@click.option("--senders", default=16, show_default=True, help="Threads calling destinations.")
@click.option(
    "--max-in-flight", default=256, show_default=True, help="Claimed sends not answered yet."
)
@click.option(
    "--socket",
    "socket_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The daemon's socket, for fired prompts and runs (default: $VIGIL_SOCKET, "
    "[rpc] socket_path).",
)
@click.option("--no-metrics", is_flag=True, help="Do not serve /metrics.")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO instead of WARNING.")
@log_level_option
@group_protocol_option
@pass_state
def delivery(
    state: CliState,
    instance: str | None,
    group: str | None,
    senders: int,
    max_in_flight: int,
    socket_path: Path | None,
    no_metrics: bool,
    verbose: bool,
) -> None:
    """Run a delivery worker: outbox entries to destinations, at least once.

    \b
    Example:
      vigil delivery --instance node-1
    """
    process = start(
        state,
        _TOPICS,
        name="delivery",
        instance=instance,
        metrics=not no_metrics,
        verbose=verbose,
        redis=True,
    )
    config = process.config
    settings = DeliverySettings(
        bootstrap=process.bootstrap,
        topology=process.topology,
        instance_id=process.instance_id,
        group_id=group or process.group("delivery"),
        budget_defaults=process.default_caps,
        budget_ceilings=process.ceilings,
        senders=senders,
        max_in_flight=max_in_flight,
        group_protocol=process.group_protocol,
    )
    socket = default_socket_path(socket_path, config.rpc.socket_path)
    ring = KeyRing(process.keks, default_codec(), cache_size=config.privacy.key_cache)
    executor = VerbExecutor(
        SocketAgent(socket, config.agent.timeout.total_seconds()),
        SocketRunner(socket),
        process.topology.name(Topic.OUTBOX),
        sealer=ring,
        host=Host.of(config.subject.tenant_id, config.subject.user_id, config.chats),
    )
    budgets = process.budgets()
    with build_adapters(config, sealer=ring, clock=process.clock) as adapters:
        deps = DeliveryDeps(adapters, budgets, ring, executor, clock=process.clock)
        run_stage(process, "delivery", DeliveryWorker(settings, deps))
    budgets.close()
