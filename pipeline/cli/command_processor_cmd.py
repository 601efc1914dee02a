"""``vigil command-processor``: run one member of the command processor group until SIGTERM.

Reads ``[kafka]``, ``[instance]``, ``[metrics]``, ``[limits]``, ``[subject]`` and ``[chats]`` (the
only subject and chats that may ``run`` and ``prompt``); refuses drifted or missing topics; serves
``vigil_commands_total{verb,result}`` and the runtime's metrics; on SIGTERM or SIGINT commits and
leaves the group. Left out: the loop (``consumers.commands.loop``) and the rules
(``pipeline.rules.commands.apply``)."""

from __future__ import annotations

from typing import Final

import click

from consumers.commands.loop import CommandDeps, CommandProcessor, CommandSettings
from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import group_protocol_option, log_level_option
from pipeline.cli.process import run_stage, start
from pipeline.kafka.topics import Topic
from pipeline.rules.commands.host import Host

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
    Topic.REDELIVERIES,
    Topic.DEAD_LETTER,
    Topic.SCHEMAS,
    Topic.KEYS,
)


@click.command("command-processor")
@click.option("--instance", help="Stable instance id (default: [instance] id, then the host name).")
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
def command_processor(
    state: CliState, instance: str | None, static_membership: bool, no_metrics: bool, verbose: bool
) -> None:
    """Run the command processor: commands in; registry, watchers, grants, immediate sends
    (outbox) and results out.

    \b
    Example:
      vigil command-processor --instance node-1 --static-membership
    """
    process = start(
        state,
        _TOPICS,
        name="command-processor",
        instance=instance,
        metrics=not no_metrics,
        verbose=verbose,
    )
    config = process.config
    settings = CommandSettings(
        bootstrap=process.bootstrap,
        topology=process.topology,
        instance_id=process.instance_id,
        group_id=process.group("command-processor"),
        limits=config.limits.limits(),
        ceilings=process.ceilings,
        host=Host.of(config.subject.tenant_id, config.subject.user_id, config.chats),
        key_cache=config.privacy.key_cache,
        static_membership=static_membership,
        group_protocol=process.group_protocol,
    )
    deps = CommandDeps(keks=process.keks, clock=process.clock)
    run_stage(process, "command processor", CommandProcessor(settings, deps))
