"""``vigil ticker``: run one member of the poll ticker group until SIGTERM.

Reads ``[kafka]``, ``[redis]``, ``[tools.*]``, ``[budgets.defaults]``, ``[instance]`` and
``[metrics]`` from vigil.toml; refuses to start when its topics are missing or drifted (with the
command that fixes it); serves Prometheus metrics on ``[metrics] listen`` (due instants, missed
instants by policy, tool latency and errors by code, the runtime's own); on SIGTERM or SIGINT
commits the open transaction and leaves the group.

Left out: the loop itself (``producers.ticker.loop``).
"""

from __future__ import annotations

import logging
from datetime import timedelta

import click
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from pipeline.cli import shutdown
from pipeline.cli.context import CliState, pass_state
from pipeline.cli.process import default_caps, serve_metrics
from pipeline.config import VigilConfig
from pipeline.kafka.admin import check_topology, connect_admin
from pipeline.kafka.topics import Topic
from pipeline.redis.budgets import RedisBudgets
from pipeline.runtime.app import stop_on_sigterm
from producers.ticker.loop import PollTicker, TickerSettings

__all__ = ["ticker"]

_TOPICS = (
    Topic.WATCHERS,
    Topic.EVENTS,
    Topic.TICKS,
    Topic.TICKER_STATE,
    Topic.GRANTS,
    Topic.DEAD_LETTER,
)


@click.command()
@click.option("--instance", help="Stable instance id (default: [instance] id, then the host name).")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1, max=256),
    default=16,
    show_default=True,
    help="Governed tool calls in flight at once.",
)
@click.option(
    "--grace",
    type=click.IntRange(min=1, max=300),
    default=5,
    show_default=True,
    help="Seconds after a due instant that still count as on time (later is missed).",
)
@click.option("--no-metrics", is_flag=True, help="Do not serve /metrics.")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO instead of WARNING.")
@pass_state
def ticker(
    state: CliState,
    instance: str | None,
    concurrency: int,
    grace: int,
    no_metrics: bool,
    verbose: bool,
) -> None:
    """Run a poll ticker: due instants in, governed tool calls, ticks out."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    config: VigilConfig = state.config
    topology = config.kafka.topology()
    check_topology(connect_admin(config.kafka.bootstrap_servers), topology, _TOPICS)
    # One quick retry: an outage defers watchers for a step, it must not stall the loop.
    client = redis.Redis.from_url(
        config.redis.url.get_secret_value(),
        socket_timeout=2.0,
        socket_connect_timeout=2.0,
        retry=Retry(NoBackoff(), 1),
    )
    settings = TickerSettings(
        bootstrap=config.kafka.bootstrap_servers,
        topology=topology,
        instance_id=instance or config.instance.resolved_id(),
        grace=timedelta(seconds=grace),
        concurrency=concurrency,
    )
    poll_ticker = PollTicker(
        settings,
        tools=config.tools,
        budgets=RedisBudgets(client),
        default_caps=default_caps(config.budgets.defaults),
    )
    if not no_metrics:
        port = serve_metrics(config.metrics.listen)
        click.echo(f"metrics on port {port}", err=True)
    stop = shutdown.stop_event()
    stop_on_sigterm(stop)
    click.echo(f"ticker {settings.group}/{settings.instance_id} running", err=True)
    poll_ticker.run(stop)
    click.echo("ticker stopped", err=True)
