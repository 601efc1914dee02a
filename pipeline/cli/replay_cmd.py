"""``vigil replay``: re-derive decisions over a range of inputs and print what differs.

Reads the history (``pipeline.ops.replay_reader``), runs :func:`pipeline.rules.replay.replay`,
prints a summary and one line per difference (``--json``: one object). Exit 0 when nothing differs
or for a ``--definition`` what-if, 1 when unchanged definitions reproduce differently. For one
watcher it adds the recovery dry run (``--apply``: ``pipeline.cli.recover_out``)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import timeout_option
from pipeline.cli.recover_out import print_recovery, recover, recovery_scope
from pipeline.kafka.scan import Bound, Progress
from pipeline.ops.replay_reader import Scope, read_history
from pipeline.ops.validate import load_definition
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.replay import replay
from pipeline.rules.replay_model import Difference, ReplayClock, ReplayReport, affected_keys

__all__ = ["replay_command", "report_json"]

_SHOWN = 50  # difference lines printed in text mode; --json has them all


@click.command("replay")
@click.option(
    "--from",
    "start",
    help="Inputs from (inclusive): earliest (default), an RFC 3339 instant (arrival time), or "
    "offsets events:P:OFFSET,ticks:P:OFFSET (then only the partitions named are read).",
)
@click.option(
    "--to", "end", help="Inputs up to (exclusive): latest (default), an instant, or offsets."
)
@click.option("--watcher", help='Only this watcher: its id, or its key ["t","u","id"].')
@click.option("--subject", help='Only this subject: tenant/user or ["t","u"].')
@click.option(
    "--clock",
    type=click.Choice([c.value for c in ReplayClock]),
    default=ReplayClock.RECORDED.value,
    show_default=True,
    help="Evaluate at the recorded evaluation time, or at each input's arrival.",
)
@click.option(
    "--definition",
    "definition_file",
    type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    help="Replay against this changed definition (JSON or YAML): what would it have fired?",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--apply",
    "apply_recovery",
    is_flag=True,
    help="Operators, with --watcher: write what an authorization failure skipped, decided "
    "with the current grants (without it: a dry run says what would be written).",
)
@timeout_option
@pass_state
def replay_command(
    state: CliState,
    start: str | None,
    end: str | None,
    watcher: str | None,
    subject: str | None,
    clock: str,
    definition_file: Path | None,
    as_json: bool,
    apply_recovery: bool,
    timeout: float,
) -> None:
    """Re-run the evaluator over recorded inputs and report decisions that differ.

    \b
    Example:
      vigil replay --from 2026-12-01T00:00:00Z --to latest --watcher release-build-failed
      vigil --as-operator replay --watcher release-build-failed --from 2026-12-01T00:00:00Z --apply
    """
    config = state.config
    scope = Scope.parse(watcher, subject)
    if apply_recovery:
        scope = recovery_scope(state, scope, definition_file)
    override = None
    if definition_file is not None:
        override = _override(definition_file, scope, config.subject.tenant_id,
                             config.subject.user_id)  # fmt: skip
        scope = Scope(*override.watcher_key)
    state.reach_kafka()
    progress = Progress("replay")
    history = read_history(
        config.kafka.bootstrap_servers,
        config.kafka.topology(),
        Bound.parse(start, end=False),
        Bound.parse(end, end=True),
        scope,
        read_at=datetime.now(UTC),
        progress=progress,
        keks=config.privacy.keks(),
    )
    progress.done(f"read {len(history.inputs)} inputs and {len(history.receipts)} receipts")
    report = replay(history, clock=ReplayClock(clock), override=override)
    recovered = None
    if override is None and scope.watcher_id is not None:
        recovered = recover(state, history, scope, apply=apply_recovery, timeout=timeout)
    if as_json:
        body = report_json(report)
        if recovered is not None:
            body["recovery"] = recovered
        click.echo(json.dumps(body, indent=2, sort_keys=True))
    else:
        _print(report)
        if recovered is not None:
            print_recovery(recovered)
    if report.differences and override is None:
        sys.exit(1)


def _override(path: Path, scope: Scope, tenant_id: str, user_id: str) -> WatcherDefinition:
    text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    body = load_definition(text)
    body.pop("version", None)
    tenant = str(body.get("tenant_id", scope.tenant_id or tenant_id))
    user = str(body.get("user_id", scope.user_id or user_id))
    return WatcherDefinition.from_json(body, tenant_id=tenant, user_id=user)


def _difference_json(d: Difference) -> dict[str, Any]:
    replayed = d.replayed
    return {
        "kind": d.kind.value,
        "watcher": list(d.watcher),
        "version": d.version,
        "position": d.position,
        "trigger": dict(d.trigger),
        "recorded": {
            "outcome": d.recorded.outcome.value,
            "reason": d.recorded.reason.value,
            "delivery_key": d.recorded.delivery_key,
        },
        "replayed": None
        if replayed is None
        else {
            "outcome": replayed.outcome.value,
            "reason": replayed.reason.value,
            "delivery_key": replayed.delivery_key,
        },
    }


def report_json(report: ReplayReport) -> dict[str, Any]:
    """The report as a JSON object (``--json``)."""
    return {
        "replayed": report.replayed,
        "differences": [_difference_json(d) for d in report.differences],
        "difference_count": len(report.differences),
        "skipped": {reason.value: n for reason, n in report.skipped.items()},
        "reasons": {reason.value: n for reason, n in sorted(report.reasons.items())},
        "would_fire": report.would_fire,
        "would_not_fire": report.would_not_fire,
        "affected_keys": affected_keys(report.differences),
    }


def _print(report: ReplayReport) -> None:
    for d in report.differences[:_SHOWN]:
        after = "not evaluated" if d.replayed is None else f"{d.replayed.reason.value}"
        key = d.recorded.delivery_key or (d.replayed.delivery_key if d.replayed else None)
        trigger = ",".join(f"{k}={v}" for k, v in sorted(d.trigger.items()))
        click.echo(
            f"{d.kind.value:16} {d.watcher[2]} v{d.version} {trigger} "
            f"recorded={d.recorded.reason.value} replayed={after} key={key or '-'}"
        )
    if len(report.differences) > _SHOWN:
        click.echo(f"... and {len(report.differences) - _SHOWN} more (use --json)")
    skipped = ", ".join(f"{r.value}={n}" for r, n in report.skipped.items()) or "none"
    click.echo(
        f"replayed {report.replayed} evaluations: {len(report.differences)} differences "
        f"({len(report.would_fire)} would fire, {len(report.would_not_fire)} would not); "
        f"skipped: {skipped}"
    )
