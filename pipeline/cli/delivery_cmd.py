"""``vigil delivery``: run one member of the delivery consumer group until SIGTERM.

Reads ``[kafka]``, ``[redis]``, ``[destinations.*]``, ``[chats.*]``, ``[budgets.defaults]``,
``[instance]``, ``[metrics]``, ``[run]`` and ``[rpc]`` from vigil.toml (a fired ``prompt``
asks the local daemon's agent over its socket, a fired ``run`` starts an allowlisted script
here). Refuses to start when its topics are missing or drifted (with the command that fixes
it) or a destination's secret variable is unset; serves Prometheus metrics on
``[metrics] listen``. On SIGTERM or SIGINT it stops claiming, waits (bounded) for the sends in
flight, records their results, commits and leaves the group; what it could not record is sent
again by the next owner (at least once).

Left out: the loop itself (``consumers.delivery.loop``) and the adapters (``consumers.delivery.adapters``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import click
import redis

from consumers.delivery.adapters import build_adapters
from consumers.delivery.adapters.verbs import SocketAgent, VerbExecutor
from consumers.delivery.budgets import BatchBudgets
from consumers.delivery.loop import DEFAULT_GROUP, DeliverySettings, DeliveryWorker
from pipeline.cli import shutdown
from pipeline.cli.context import CliState, pass_state
from pipeline.cli.process import default_caps, serve_metrics
from pipeline.config import VigilConfig
from pipeline.control.run import ScriptRunner
from pipeline.control.socket.server import default_socket_path
from pipeline.kafka.admin import check_topology, connect_admin
from pipeline.kafka.topics import Topic
from pipeline.runtime.app import stop_on_sigterm

__all__ = ["delivery"]

_TOPICS = (
    Topic.OUTBOX,
    Topic.DELIVERY_STATE,
    Topic.LIFECYCLE,
    Topic.GRANTS,
    Topic.NOTIFICATIONS,
    Topic.DEAD_LETTER,
)


@click.command()
@click.option("--instance", help="Stable instance id (default: [instance] id, then the host name).")
@click.option("--group", default=DEFAULT_GROUP, show_default=True, help="Consumer group id.")
@click.option("--senders", default=16, show_default=True, help="Threads calling destinations.")
@click.option(
    "--max-in-flight", default=256, show_default=True, help="Claimed sends not answered yet."
)
@click.option(
    "--socket",
    "socket_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The daemon's socket, for fired prompts (default: $VIGIL_SOCKET, [rpc] socket_path).",
)
@click.option("--no-metrics", is_flag=True, help="Do not serve /metrics.")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO instead of WARNING.")
@pass_state
def delivery(
    state: CliState,
    instance: str | None,
    group: str,
    senders: int,
    max_in_flight: int,
    socket_path: Path | None,
    no_metrics: bool,
    verbose: bool,
) -> None:
    """Run a delivery worker: outbox entries to destinations, at least once."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    config: VigilConfig = state.config
    topology = config.kafka.topology()
    check_topology(connect_admin(config.kafka.bootstrap_servers), topology, _TOPICS)
    client = redis.Redis.from_url(
        config.redis.url.get_secret_value(), socket_timeout=2.0, socket_connect_timeout=2.0
    )
    settings = DeliverySettings(
        topology=topology,
        instance_id=instance or config.instance.resolved_id(),
        group_id=group,
        budget_defaults=default_caps(config.budgets.defaults),
        senders=senders,
        max_in_flight=max_in_flight,
    )
    socket = default_socket_path(socket_path, config.rpc.socket_path)
    executor = VerbExecutor(
        SocketAgent(socket, config.agent.timeout.total_seconds()),
        ScriptRunner(config.run.allow_dir, socket),
        topology.name(Topic.OUTBOX),
    )
    with build_adapters(config) as adapters:
        worker = DeliveryWorker(
            config.kafka.bootstrap_servers,
            settings,
            adapters,
            BatchBudgets(client),
            executor=executor,
        )
        if not no_metrics:
            port = serve_metrics(config.metrics.listen)
            click.echo(f"metrics on port {port}", err=True)
        stop = shutdown.stop_event()
        stop_on_sigterm(stop)
        click.echo(f"delivery {settings.group_id}/{settings.instance_id} running", err=True)
        worker.run(stop)
    client.close()
    click.echo("delivery stopped", err=True)
