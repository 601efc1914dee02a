"""``vigil topics create|describe``: make the broker hold the topics of DESIGN.md §2.

``create`` is idempotent (creates what is missing, resets drifted configs, refuses a drifted
partition count, warns of unsafe cluster settings); ``describe`` prints each topic's state and exits
1 on drift or a setting that would lose acknowledged data or stall transactions
(``pipeline.kafka.durability``). Left out: the specs and broker calls (``pipeline.kafka``)."""

from __future__ import annotations

import json
import shlex

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.kafka.admin import (
    REPARTITION_HINT,
    TopicState,
    TopicStatus,
    connect_admin,
    describe,
    ensure_topics,
)
from pipeline.kafka.durability import cluster_findings
from pipeline.kafka.topics import Topology

__all__ = ["topics"]

_partitions_option = click.option(
    "--partitions",
    type=click.IntRange(min=1),
    help="Partitions per topic (default: [kafka] partitions, 12).",
)
_prefix_option = click.option(
    "--prefix", help="Topic name prefix (default: [kafka] topic_prefix, 'vigil.')."
)


def _topology(state: CliState, partitions: int | None, prefix: str | None) -> Topology:
    kafka = state.config.kafka
    return Topology(
        prefix=kafka.topic_prefix if prefix is None else prefix,
        partitions=partitions or kafka.partitions,
        replication_factor=kafka.replication_factor,
        min_insync_replicas=kafka.min_insync_replicas,
    )


def _fix(state: CliState, topology: Topology) -> str:
    """The exact command that creates or repairs ``topology`` with this configuration."""
    config = ["--config", str(state.config_path)] if state.config_path is not None else []
    flags = ["--prefix", topology.prefix, "--partitions", str(topology.partitions)]
    return shlex.join(["vigil", *config, "topics", "create", *flags])


@click.group()
def topics() -> None:
    """Create and check vigil's Kafka topics.

    \b
    Example:
      vigil topics describe --json
    """


@topics.command()
@_partitions_option
@_prefix_option
@pass_state
def create(state: CliState, partitions: int | None, prefix: str | None) -> None:
    """Create missing topics and reset drifted configs (safe to run again).

    \b
    Example:
      vigil topics create --partitions 12
    """
    topology = _topology(state, partitions, prefix)
    state.reach_kafka()
    admin = connect_admin(state.config.kafka.bootstrap_servers)
    report = ensure_topics(admin, topology)
    for name in report.created:
        click.echo(f"created      {name}")
    for name in report.reconfigured:
        click.echo(f"reconfigured {name}")
    click.echo(
        f"{len(report.created)} created, {len(report.reconfigured)} reconfigured, "
        f"{len(report.unchanged)} already as specified"
    )
    for line in cluster_findings(admin, describe(admin, topology)):
        click.echo(f"warning: {line}", err=True)


@topics.command("describe")
@_partitions_option
@_prefix_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_state
def describe_cmd(
    state: CliState, partitions: int | None, prefix: str | None, as_json: bool
) -> None:
    """Show each topic next to its spec; exit 1 when anything drifted.

    \b
    Example:
      vigil topics describe
    """
    topology = _topology(state, partitions, prefix)
    state.reach_kafka()
    admin = connect_admin(state.config.kafka.bootstrap_servers)
    statuses = describe(admin, topology)
    cluster = cluster_findings(admin, statuses)
    fixes = _fixes(state, topology, statuses)
    ok = all(s.state is TopicState.OK for s in statuses) and not cluster
    if as_json:
        document = {
            "ok": ok,
            "topics": [s.as_json() for s in statuses],
            "cluster": cluster,
            "fix": fixes,
        }
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(
            f"{'topic':<40} {'partitions':>10} {'replicas':>8} {'min ISR':>7}  cleanup  state"
        )
        for status in statuses:
            spec = topology.spec(status.topic)
            click.echo(
                f"{status.name:<40} {status.actual_partitions or '-':>6}/"
                f"{status.expected_partitions:<3} {status.replicas or '-':>8} "
                f"{status.min_insync or '-':>7}  {spec.cleanup.value:<8} {status.state.value}"
            )
        for status in statuses:
            problem = status.problem()
            if problem:
                click.echo(problem, err=True)
        for line in cluster:
            click.echo(line, err=True)
        for fix in fixes:
            click.echo(fix, err=True)
    if not ok:
        raise click.exceptions.Exit(1)


def _fixes(state: CliState, topology: Topology, statuses: list[TopicStatus]) -> list[str]:
    states = {s.state for s in statuses}
    fixes = []
    if states & {TopicState.MISSING, TopicState.CONFIGS_DRIFTED}:
        fixes.append(f"fix: {_fix(state, topology)}")
    if TopicState.PARTITIONS_DRIFTED in states:
        fixes.append(f"partition counts drifted: {REPARTITION_HINT}")
    return fixes
