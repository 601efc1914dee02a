"""``vigil explain <watcher>``: why a watcher did or did not fire.

Prints the watcher's evaluations in time order (outcome, reason code, trigger, evidence digest,
delivery state), for the configured subject or ``--tenant/--user``; ``--json`` prints them as
a JSON array. An evaluation whose data key is shredded prints as ``erased``. Left out: reading
and joining (``pipeline.ops.explain``).
"""

from __future__ import annotations

import json

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import subject_option
from pipeline.cli.round_trip import complete_watcher_ids
from pipeline.kafka.scan import Progress
from pipeline.ops.explain import ExplainRow, read_explanation

__all__ = ["explain", "render"]


@click.command()
@click.argument("watcher_id", shell_complete=complete_watcher_ids)
@subject_option(help="The watcher's subject (default: [subject]).")
@click.option("--json", "as_json", is_flag=True, help="Print the evaluations as JSON.")
@pass_state
def explain(
    state: CliState, watcher_id: str, tenant: str | None, user: str | None, as_json: bool
) -> None:
    """Show each evaluation of WATCHER_ID with its outcome, reason and delivery state.

    \b
    Example:
      vigil explain release-build-failed --json
    """
    if (tenant is None) != (user is None):
        raise click.UsageError("--tenant and --user go together")
    config = state.config
    state.reach_kafka()
    progress = Progress("explain")
    rows = read_explanation(
        config.kafka.bootstrap_servers,
        config.kafka.topology(),
        *state.subject(tenant, user),
        watcher_id,
        progress,
        keks=config.privacy.keks(),
    )
    progress.done(f"{len(rows)} evaluations of {watcher_id}")
    if as_json:
        click.echo(json.dumps([row.as_json() for row in rows], indent=2, sort_keys=True))
        return
    for row in rows:
        click.echo(render(row))


def render(row: ExplainRow) -> str:
    """One evaluation on one line; the delivery state only when it created an entry."""
    if row.erased:
        when = f"{row.evaluated_at:%Y-%m-%dT%H:%M:%S}Z"
        return f"{when} v{row.version} erased (its data key is shredded)"
    trigger = ",".join(f"{k}={v}" for k, v in sorted(row.trigger.items()) if k != "kind")
    line = (
        f"{row.evaluated_at:%Y-%m-%dT%H:%M:%S}Z v{row.version} {row.outcome:20} "
        f"{row.reason:20} {trigger} digest={row.evidence_digest[:12]}"
    )
    if row.delivery is not None:
        line += f" delivery={row.delivery.status}"
        if row.delivery.reason:
            line += f"({row.delivery.reason})"
        line += f" key={(row.delivery_key or '')[:12]}"
    if row.note:
        line += f"  # {row.note}"
    return line
