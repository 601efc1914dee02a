"""``vigil evaluator``: run one member of the evaluator consumer group until SIGTERM.

Reads ``[kafka]``, ``[redis]``, ``[budgets.defaults]``, ``[instance]`` and ``[metrics]``; registers
the pinned evaluators this build ships (any other ``key@vN`` evaluates as ``evaluator_missing``);
refuses drifted or missing topics; serves metrics; on SIGTERM or SIGINT commits and leaves the
group. Left out: the stage itself (``consumers.evaluator``)."""

from __future__ import annotations

import click

from consumers.evaluator.stage import EvaluatorDeps, EvaluatorSettings, EvaluatorStage
from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import group_protocol_option, log_level_option
from pipeline.cli.process import run_stage, start
from pipeline.kafka.topics import Topic
from producers.ticker.tools import REGISTERED

__all__ = ["evaluator"]

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
    Topic.SCHEMAS,
    Topic.KEYS,
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
@log_level_option
@group_protocol_option
@pass_state
def evaluator(
    state: CliState,
    instance: str | None,
    static_membership: bool,
    no_metrics: bool,
    verbose: bool,
) -> None:
    """Run an evaluator: events and ticks in, decisions out, in one transaction.

    \b
    Example:
      vigil evaluator --instance node-1 --static-membership
    """
    process = start(
        state,
        _TOPICS,
        name="evaluator",
        instance=instance,
        metrics=not no_metrics,
        verbose=verbose,
        redis=True,
    )
    settings = EvaluatorSettings(
        bootstrap=process.bootstrap,
        topology=process.topology,
        instance_id=process.instance_id,
        group_id=process.group("evaluator"),
        static_membership=static_membership,
        group_protocol=process.group_protocol,
        default_caps=process.default_caps,
        ceilings=process.ceilings,
        evaluators=REGISTERED,
        key_cache=process.config.privacy.key_cache,
    )
    deps = EvaluatorDeps(process.budgets(), keks=process.keks, clock=process.clock)
    run_stage(process, "evaluator", EvaluatorStage(settings, deps))
