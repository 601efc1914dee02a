"""``vigil erase --tenant T --user U``: forget a subject, for operators (DESIGN.md §10).

Sends the command processor's ``erase`` command as the operator (``vigil --as-operator erase``) and
waits for its result, after asking for confirmation (``--yes`` skips it; with no terminal to answer,
the answer is no). The processor tombstones every watcher of the subject in ``registry``,
``watchers`` and ``lifecycle`` and writes one subject-wide ``lifecycle`` record, from which the
evaluator, delivery and the budget store erase their own state. The CLI prints what was erased (or
``--json``); a refusal prints one line and exits 1.

Left out: the rule (``pipeline.rules.commands.apply``) and what each consumer does with the erasure
record.
"""

from __future__ import annotations

from typing import Any

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.cli.watch_cmd import report, send_command
from pipeline.control.client import DEFAULT_TIMEOUT_S
from pipeline.rules.commands import CommandVerb

__all__ = ["erase", "render_erased"]


def render_erased(result: dict[str, Any]) -> str:
    """``erased T/U: N watchers`` and then one erased watcher id a line."""
    ids = [str(i) for i in result.get("watcher_ids", [])]
    count = int(result.get("erased", len(ids)))
    noun = "watcher" if count == 1 else "watchers"
    head = f"erased {result.get('tenant_id')}/{result.get('user_id')}: {count} {noun}"
    return "\n".join([head, *(f"  {watcher_id}" for watcher_id in ids)])


@click.command()
@click.option("--tenant", required=True, help="The subject's tenant.")
@click.option("--user", required=True, help="The subject's user.")
@click.option("--yes", is_flag=True, help="Erase without asking for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for the command processor's answer.",
)
@click.pass_context
@pass_state
def erase(
    state: CliState,
    ctx: click.Context,
    tenant: str,
    user: str,
    yes: bool,
    as_json: bool,
    timeout: float,
) -> None:
    """Erase a subject: every watcher of TENANT/USER, everywhere vigil keeps it.

    For operators (vigil --as-operator erase …). Watchers, their state, undelivered
    notifications and budget keys of the subject are removed; this cannot be undone. Asks
    first unless --yes. A grant of the subject must still let it be managed (seed 000).

    \b
    Example:
      vigil --as-operator erase --tenant acme --user u-42
      vigil --as-operator erase --tenant acme --user u-42 --yes --json
    """
    ctx.find_root().meta["vigil.timeout"] = timeout
    if not yes:
        click.confirm(
            f"Erase every watcher of tenant {tenant!r} user {user!r}? This cannot be undone.",
            abort=True,
            err=True,
        )
    result = send_command(state, CommandVerb.ERASE, tenant, user, operator_verb=True)
    report(result, as_json, render_erased)
