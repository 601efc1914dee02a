"""``vigil deliveries list|show|redeliver``: deliveries and dead letters, and sending one again.

``list`` (newest first; ``--state dead``, ``--watcher``) and ``show KEY`` read ``delivery-state``
for the configured subject or ``--tenant/--user``; ``redeliver KEY`` is a ``redeliver`` command. A
missing, foreign or non-redeliverable key exits 1; ``--json`` prints JSON. Left out: reading
(``pipeline.control.deliveries``) and the rule (``pipeline.rules.commands``)."""

from __future__ import annotations

import json
from typing import Any

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import subject_option, timeout_option
from pipeline.cli.round_trip import report, send_command
from pipeline.control.deliveries import (
    delivery_state_filter,
    delivery_view,
    read_deliveries,
    read_delivery,
)
from pipeline.rules.commands import CommandVerb
from pipeline.rules.outcomes import DeliveryStatus

__all__ = ["deliveries", "render"]

_STATES = [s.value for s in DeliveryStatus] + ["dead"]


def render(view: dict[str, Any]) -> str:
    """One delivery on one line."""
    line = (
        f"{view['delivery_key']}  {view['state']:12} attempts={view['attempts']} "
        f"watcher={view['watcher_id']} target={view['target']}"
    )
    for name in ("reason", "detail", "last_error", "next_attempt_at", "redeliveries"):
        if view.get(name):
            line += f" {name}={view[name]}"
    return line


def _one(state: CliState, tenant: str, user: str, key: str) -> dict[str, Any]:
    config = state.config
    record = read_delivery(
        config.kafka.bootstrap_servers, config.kafka.topology(), tenant, user, key
    )
    if record is None:
        click.echo(f"Error: delivery_key: no delivery {key} [not_found]", err=True)
        raise click.exceptions.Exit(1)
    return delivery_view(record)


@click.group()
@timeout_option
@click.pass_context
def deliveries(ctx: click.Context, timeout: float) -> None:
    """List deliveries and dead letters; redeliver one under the same key.

    \b
    Example:
      vigil deliveries list --state dead
    """
    ctx.find_root().meta["vigil.timeout"] = timeout


@deliveries.command("list")
@click.option("--state", "wanted", type=click.Choice(_STATES), help="Only this state (dead).")
@click.option("--watcher", help="Only this watcher's deliveries.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@subject_option(help="The subject (default: [subject] of the configuration).")
@click.option("--json", "as_json", is_flag=True, help="Print the deliveries as JSON.")
@pass_state
def list_cmd(
    state: CliState,
    wanted: str | None,
    watcher: str | None,
    limit: int,
    tenant: str | None,
    user: str | None,
    as_json: bool,
) -> None:
    """The subject's deliveries, newest first.

    \b
    Example:
      vigil deliveries list --state dead --watcher release-build-failed --json
    """
    tenant_id, user_id = state.subject(tenant, user)
    config = state.config
    records = read_deliveries(
        config.kafka.bootstrap_servers,
        config.kafka.topology(),
        tenant_id,
        user_id,
        state=delivery_state_filter(wanted),
        watcher_id=watcher,
    )
    views = [delivery_view(r) for r in records[:limit]]
    if as_json:
        click.echo(json.dumps({"deliveries": views}, indent=2, sort_keys=True))
        return
    for view in views:
        click.echo(render(view))
    if not views:
        click.echo("no deliveries")


@deliveries.command()
@click.argument("delivery_key")
@subject_option(help="The subject (default: [subject] of the configuration).")
@click.option("--json", "as_json", is_flag=True, help="Print the delivery as JSON.")
@pass_state
def show(
    state: CliState, delivery_key: str, tenant: str | None, user: str | None, as_json: bool
) -> None:
    """One delivery: state, attempts, next attempt, last error.

    \b
    Example:
      vigil deliveries show 3f5c…e1 --json
    """
    view = _one(state, *state.subject(tenant, user), delivery_key)
    if as_json:
        click.echo(json.dumps(view, indent=2, sort_keys=True))
        return
    click.echo("\n".join(f"{name}: {value}" for name, value in view.items()))


@deliveries.command()
@click.argument("delivery_key")
@subject_option(help="The subject (default: [subject] of the configuration).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_state
def redeliver(
    state: CliState, delivery_key: str, tenant: str | None, user: str | None, as_json: bool
) -> None:
    """Send a dead-lettered or suppressed delivery again (same key, fresh attempt count).

    \b
    Example:
      vigil deliveries redeliver 3f5c…e1
    """
    tenant_id, user_id = state.subject(tenant, user)
    view = _one(state, tenant_id, user_id, delivery_key)
    if not view["redeliverable"]:
        click.echo(
            f"Error: delivery_key: delivery {delivery_key} is {view['state']}: only a "
            "dead-lettered or suppressed delivery is redelivered [conflict]",
            err=True,
        )
        raise click.exceptions.Exit(1)
    result = send_command(
        state,
        CommandVerb.REDELIVER,
        tenant,
        user,
        delivery_key=delivery_key,
        watcher_id=view["watcher_id"],
    )
    report(result, as_json, lambda body: f"redelivery of {body['delivery_key']} requested")
