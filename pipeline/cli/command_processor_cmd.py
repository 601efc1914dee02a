"""``vigil command-processor``: run one member of the command processor group until SIGTERM.

Reads ``[kafka]``, ``[instance]`` and ``[metrics]`` from vigil.toml; refuses to start when its
topics are missing or drifted (naming the command that fixes it); serves Prometheus metrics
(``vigil_commands_total{verb,result}`` and the runtime's) on ``[metrics] listen``; on SIGTERM
or SIGINT commits the open transaction and leaves the group.

Left out: the loop (``processor``) and the rules (``pipeline.rules.commands.apply``).
"""

from __future__ import annotations

import logging
from typing import Final

import click

from consumers.commands.loop import CommandProcessor
from pipeline.cli import shutdown
from pipeline.cli.context import CliState, pass_state
from pipeline.cli.process import serve_metrics
from pipeline.kafka.admin import check_topology, connect_admin
from pipeline.kafka.topics import Topic
from pipeline.runtime.app import stop_on_sigterm

__all__ = ["command_processor"]

_TOPICS: Final = (
    Topic.COMMANDS,
    Topic.COMMAND_RESULTS,
    Topic.REGISTRY,
    Topic.GRANTS,
    Topic.WATCHERS,
    Topic.LIFECYCLE,
    Topic.DEFINITION_LOG,
    Topic.OUTBOX,
    Topic.DEAD_LETTER,
)


@click.command("command-processor")
@click.option("--instance", help="Stable instance id (default: [instance] id, then the host name).")
@click.option("--no-metrics", is_flag=True, help="Do not serve /metrics.")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO instead of WARNING.")
@pass_state
def command_processor(
    state: CliState, instance: str | None, no_metrics: bool, verbose: bool
) -> None:
    """Run the command processor: commands in; registry, watchers, grants, immediate sends
    (outbox) and results out."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    config = state.config
    topology = config.kafka.topology()
    check_topology(connect_admin(config.kafka.bootstrap_servers), topology, _TOPICS)
    instance_id = instance or config.instance.resolved_id()
    processor = CommandProcessor(config.kafka.bootstrap_servers, topology, instance_id=instance_id)
    if not no_metrics:
        click.echo(f"metrics on port {serve_metrics(config.metrics.listen)}", err=True)
    stop = shutdown.stop_event()
    stop_on_sigterm(stop)
    click.echo(f"command processor {processor.app.group_id}/{instance_id} running", err=True)
    processor.run(stop)
    click.echo("command processor stopped", err=True)
