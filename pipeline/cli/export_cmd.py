"""``vigil --as-operator export --subject T/U > FILE``: one subject's watchers as a file that
``vigil import`` restores elsewhere (seed 000's snapshot).

Asks the command processor a page at a time (the ``export`` verb) and prints one JSON document,
closed watchers included, no secrets or receipts; a refusal prints one line and exits 1. Left out:
the file's shape, parser and verb (``pipeline.rules.commands.transfer``)."""

from __future__ import annotations

import json
from typing import Any

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import subject_option, timeout_option
from pipeline.cli.round_trip import report, send_command
from pipeline.rules.commands import CommandVerb
from pipeline.rules.commands.transfer import MAX_WATCHERS, PAGE_MAX

__all__ = ["export"]


@click.command()
@subject_option(required=True, help="The subject whose watchers to export.")
@timeout_option
@click.pass_context
@pass_state
def export(
    state: CliState, ctx: click.Context, tenant: str | None, user: str | None, timeout: float
) -> None:
    """Print every watcher of TENANT/USER as an export file (JSON), for `vigil import`.

    For operators. Definitions with their versions, revisions and lifecycle; no secrets, no
    receipts, no delivery history.

    \b
    Example:
      vigil --as-operator export --subject acme/u-42 > acme-u-42.json
    """
    ctx.find_root().meta["vigil.timeout"] = timeout
    document: dict[str, Any] | None = None
    while document is None or len(document["watchers"]) < min(document["total"], MAX_WATCHERS):
        offset = 0 if document is None else len(document["watchers"])
        result = send_command(state, CommandVerb.EXPORT, tenant, user, operator_verb=True,
                              offset=offset, limit=PAGE_MAX)  # fmt: skip
        if not result.ok or result.result is None:
            report(result, False, str)
            return
        page = result.result
        if document is None:
            document = dict(page)
        else:
            document["watchers"].extend(page["watchers"])
        if not page["watchers"]:
            break
    assert document is not None
    document.pop("total", None)
    click.echo(json.dumps(document, indent=2, sort_keys=True))
