"""``vigil --as-operator import -f FILE``: restore an export file's watchers in this deployment,
each kept as it was (version, revision, lifecycle).

The file is parsed whole first (a bad one is refused naming the field), then one ``import`` command
per watcher; one line per watcher (``--json``: one object), exit 1 when any was refused. Grants are
not in the file: add them first. Left out: the file's shape and the verb
(``pipeline.rules.commands.transfer``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.cli.identity import cli_principal
from pipeline.cli.options import timeout_option
from pipeline.cli.round_trip import send_command
from pipeline.rules.commands import CommandVerb, watcher_view
from pipeline.rules.commands.transfer import MAX_FILE_BYTES, parse_export

__all__ = ["import_cmd"]


@click.command("import")
@click.option(
    "-f",
    "--file",
    "path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    help="The export file (`-`: standard input).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@timeout_option
@click.pass_context
@pass_state
def import_cmd(
    state: CliState, ctx: click.Context, path: Path, as_json: bool, timeout: float
) -> None:
    """Restore the watchers of an export file (`vigil export`) in this deployment.

    For operators. Each watcher keeps its version, revision and lifecycle; one whose id is live
    here (or closed at that version or later) is refused as a conflict. Add the subject's grants
    here first.

    \b
    Example:
      vigil --as-operator --config other.toml import -f acme-u-42.json
    """
    ctx.find_root().meta["vigil.timeout"] = timeout
    cli_principal(state, operator_verb=True)  # refused before the file is read
    raw = _read(path)
    exported = parse_export(raw)
    results: list[dict[str, Any]] = []
    for entry in exported.watchers:
        result = send_command(state, CommandVerb.IMPORT, exported.tenant_id, exported.user_id,
                              operator_verb=True, watcher_id=entry.watcher_id,
                              definition=watcher_view(entry))  # fmt: skip
        error = result.error
        results.append(
            {"watcher_id": entry.watcher_id, "imported": result.ok}
            | ({} if error is None else {"error": error.model_dump(mode="json")})
        )
    if as_json:
        click.echo(json.dumps({"results": results}, indent=2, sort_keys=True))
    else:
        for row in results:
            error = row.get("error")
            outcome = (
                "imported" if error is None else f"refused: {error['message']} [{error['code']}]"
            )
            click.echo(f"{row['watcher_id']}: {outcome}")
    if any(not row["imported"] for row in results):
        raise click.exceptions.Exit(1)


def _read(path: Path) -> bytes:
    """At most the file bound (and one byte more, so a larger file is refused as such)."""
    if str(path) == "-":
        return sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    with path.open("rb") as handle:
        return handle.read(MAX_FILE_BYTES + 1)
