"""``vigil ticker``: run one member of the poll ticker group until SIGTERM.

Reads ``[kafka]``, ``[redis]``, ``[tools.*]``, ``[budgets.defaults]``, ``[instance]`` and
``[metrics]``; refuses drifted or missing topics; serves metrics (due and missed instants, tool
latency and errors, the runtime's); on SIGTERM or SIGINT commits and leaves the group. Left out: the
loop itself (``producers.ticker.loop``)."""

from __future__ import annotations

from datetime import timedelta

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import group_protocol_option, log_level_option
from pipeline.cli.process import run_stage, start
from pipeline.kafka.topics import Topic
from producers.ticker.loop import PollTicker, TickerDeps, TickerSettings

__all__ = ["ticker"]

_TOPICS = (
    Topic.WATCHERS,
    Topic.EVENTS,
    Topic.TICKS,
    Topic.TICKER_STATE,
    Topic.GRANTS,
    Topic.DEAD_LETTER,
    Topic.SCHEMAS,
    Topic.KEYS,
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
@click.option(
    "--static-membership",
    is_flag=True,
    help="Join as a static member: a restart within the session timeout keeps its partitions.",
)
@click.option("--no-metrics", is_flag=True, help="Do not serve /metrics.")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO instead of WARNING.")
@log_level_option
@group_protocol_option
@pass_state
def ticker(
    state: CliState,
    instance: str | None,
    concurrency: int,
    grace: int,
    static_membership: bool,
    no_metrics: bool,
    verbose: bool,
) -> None:
    """Run a poll ticker: due instants in, governed tool calls, ticks out.

    \b
    Example:
      vigil ticker --instance node-1
    """
    process = start(
        state,
        _TOPICS,
        name="ticker",
        instance=instance,
        metrics=not no_metrics,
        verbose=verbose,
        redis=True,
    )
    settings = TickerSettings(
        bootstrap=process.bootstrap,
        topology=process.topology,
        instance_id=process.instance_id,
        group_id=process.group("ticker"),
        grace=timedelta(seconds=grace),
        concurrency=concurrency,
        static_membership=static_membership,
        group_protocol=process.group_protocol,
        tools=process.config.tools,
        default_caps=process.default_caps,
        ceilings=process.ceilings,
        key_cache=process.config.privacy.key_cache,
    )
    deps = TickerDeps(
        budgets=process.budgets(quick_retry=True), keks=process.keks, clock=process.clock
    )
    run_stage(process, "ticker", PollTicker(settings, deps))
