"""``vigil evaluator``: run one member of the evaluator consumer group until SIGTERM.

Reads ``[kafka]``, ``[redis]``, ``[budgets.defaults]``, ``[instance]`` and ``[metrics]`` from
vigil.toml; registers the pinned evaluators this build ships (``producers.ticker.tools.REGISTERED``:
any other ``key@vN`` evaluates as ``evaluator_missing``); refuses to start when its topics are
missing or drifted (with the command that fixes it); serves Prometheus metrics on
``[metrics] listen``; on SIGTERM or SIGINT commits the open transaction and leaves the group.

Left out: the loop itself (``consumers.evaluator.loop``).
"""

from __future__ import annotations

import logging

import click
import redis

from consumers.evaluator.budgets import EvaluationBudgets
from consumers.evaluator.loop import Evaluator, EvaluatorSettings, evaluator_app, run
from pipeline.cli import shutdown
from pipeline.cli.context import CliState, pass_state
from pipeline.cli.process import default_caps, serve_metrics
from pipeline.config import VigilConfig
from pipeline.kafka.admin import check_topology, connect_admin
from pipeline.kafka.topics import Topic
from pipeline.runtime.app import stop_on_sigterm
from producers.ticker.tools import REGISTERED

__all__ = ["evaluator"]

log = logging.getLogger(__name__)

_TOPICS = (
    Topic.EVENTS,
    Topic.TICKS,
    Topic.WATCHERS,
    Topic.WATCHER_STATE,
    Topic.GRANTS,
    Topic.LIFECYCLE,
    Topic.RECEIPTS,
    Topic.OUTBOX,
    Topic.COMMANDS,
    Topic.DEAD_LETTER,
)


@click.command()
@click.option("--instance", help="Stable instance id (default: [instance] id, then the host name).")
@click.option(
    "--static-membership",
    is_flag=True,
    help="Join as a static member: a restart within the session timeout keeps its partitions.",
)
@click.option("--no-metrics", is_flag=True, help="Do not serve /metrics.")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO instead of WARNING.")
@pass_state
def evaluator(
    state: CliState,
    instance: str | None,
    static_membership: bool,
    no_metrics: bool,
    verbose: bool,
) -> None:
    """Run an evaluator: events and ticks in, decisions out, in one transaction."""
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
    caps = default_caps(config.budgets.defaults)
    processor = Evaluator(topology, EvaluationBudgets(client), caps, evaluators=REGISTERED)
    if not no_metrics:
        port = serve_metrics(config.metrics.listen)
        click.echo(f"metrics on port {port}", err=True)
    settings = EvaluatorSettings(
        bootstrap=config.kafka.bootstrap_servers,
        topology=topology,
        instance_id=instance or config.instance.resolved_id(),
        static_membership=static_membership,
    )
    app = evaluator_app(settings, processor)
    stop = shutdown.stop_event()
    stop_on_sigterm(stop)
    click.echo(f"evaluator {settings.group}/{settings.instance_id} running", err=True)
    run(app, stop, processor.metrics)
    click.echo("evaluator stopped", err=True)
