"""``vigil replay``'s recovery of what an authorization failure skipped: the dry run and ``--apply``
(DESIGN.md §10 "Authorization failure and checkpoints").

:func:`recover` plans one watcher's recovery with the current grants and says what ``--apply`` would
write; with ``--apply`` (operators) a ``replay_apply`` command must answer ``ok`` before the
receipts and entries are written in one transaction; applying twice writes nothing twice. Left out:
the rules, reads and writes (``pipeline.ops.replay_apply``) and the replay report."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from pipeline.cli.context import CliState
from pipeline.cli.round_trip import send_command
from pipeline.kafka.serde import default_codec
from pipeline.ops.replay_apply import read_grants, write_recovery
from pipeline.ops.replay_reader import Scope, key_ring
from pipeline.rules.commands import CommandVerb
from pipeline.rules.recovery import RecoveryPlan, plan_recovery
from pipeline.rules.replay_model import History

__all__ = ["print_recovery", "recover", "recovery_scope"]


def recovery_scope(state: CliState, scope: Scope, definition: Path | None) -> Scope:
    """The one watcher ``--apply`` recovers (of the CLI's subject unless named), or a usage
    error for what ``--apply`` does not do."""
    if definition is not None:
        raise click.UsageError("--apply decides with the recorded definitions: no --definition")
    if scope.watcher_id is None:
        raise click.UsageError("--apply recovers one watcher: name it with --watcher")
    if not state.as_operator:
        raise click.UsageError(
            "--apply is an operator action: run `vigil --as-operator replay … --apply`"
        )
    return Scope(*state.subject(scope.tenant_id, scope.user_id), scope.watcher_id)


def recover(
    state: CliState, history: History, scope: Scope, *, apply: bool, timeout: float
) -> dict[str, Any]:
    """What recovering ``scope``'s watcher writes; with ``apply``, written (exit 1 on a
    refusal)."""
    config = state.config
    bootstrap, topology = config.kafka.bootstrap_servers, config.kafka.topology()
    codec = default_codec()
    grants = read_grants(bootstrap, topology, codec)
    now = datetime.now(UTC)
    plan = plan_recovery(history, grants, now)
    if apply and plan.recoveries:
        newest = max(r.receipt.watcher_version for r in plan.recoveries)
        plan = plan_recovery(history, grants, now, version=newest)
    body = _plan_json(plan, dry_run=not apply)
    if not apply or not plan.recoveries:
        return body
    assert scope.tenant_id is not None and scope.user_id is not None
    click.get_current_context().find_root().meta["vigil.timeout"] = timeout
    result = send_command(
        state,
        CommandVerb.REPLAY_APPLY,
        scope.tenant_id,
        scope.user_id,
        operator_verb=True,
        watcher_id=scope.watcher_id,
        version=newest,
        text=_summary(plan),
    )
    if result.error is not None:
        where = f"{result.error.field}: " if result.error.field else ""
        click.echo(f"Error: {where}{result.error.message} [{result.error.code.value}]", err=True)
        raise click.exceptions.Exit(1)
    ring = key_ring(bootstrap, topology, codec, config.privacy.keks())
    written = write_recovery(bootstrap, topology, codec, ring, plan, config.namespace.name)
    body["applied"] = {
        "records": written,
        "receipts": len(plan.recoveries),
        "outbox_entries": len(plan.entries),
        "audit": (result.result or {}).get("note"),
    }
    return body


def _summary(plan: RecoveryPlan) -> str:
    positions = [r.receipt.position or "-" for r in plan.recoveries]
    return (
        f"{len(plan.recoveries)} skipped evaluations recovered, {len(plan.entries)} outbox "
        f"entries; inputs {positions[0]} .. {positions[-1]}"
    )


def _plan_json(plan: RecoveryPlan, *, dry_run: bool) -> dict[str, Any]:
    return {
        "dry_run": dry_run,
        "would_write": [
            {
                "position": r.receipt.position,
                "version": r.receipt.watcher_version,
                "trigger": dict(r.receipt.trigger),
                "outcome": r.receipt.outcome.value,
                "reason": r.receipt.reason.value,
                "delivery_key": None if r.outbox is None else r.outbox.delivery_key,
            }
            for r in plan.recoveries
        ],
        "left": {
            "still_denied": plan.still_denied,
            "recovered_before": plan.recovered_before,
            "other_version": plan.other_version,
            "once": plan.once,
            "change": plan.change,
            "in_outbox": plan.in_outbox,
        },
        "applied": None,
    }


def print_recovery(body: dict[str, Any]) -> None:
    """The recovery part of the text report."""
    rows = body["would_write"]
    left = ", ".join(f"{name}={n}" for name, n in body["left"].items() if n) or "none"
    applied = body["applied"]
    if applied is None:
        verb = "would write" if body["dry_run"] else "wrote"
        click.echo(f"recovery: {verb} {len(rows)} skipped evaluations; left: {left}")
    for row in rows[:50]:
        trigger = ",".join(f"{k}={v}" for k, v in sorted(row["trigger"].items()))
        click.echo(
            f"  {row['position']} v{row['version']} {trigger} {row['reason']} "
            f"key={row['delivery_key'] or '-'}"
        )
    if applied is not None:
        click.echo(
            f"recovery applied: {applied['receipts']} receipts and {applied['outbox_entries']} "
            f"outbox entries written; left: {left}; audit: {applied['audit']}"
        )
    elif body["dry_run"] and rows:
        click.echo("  (a dry run: `vigil --as-operator replay … --apply` writes them)")
