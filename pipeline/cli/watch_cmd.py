"""``vigil watch create|update|propose|approve|show|list|pause|resume|cancel|validate``.

Owns each verb's options and how its result prints; every verb but ``validate`` (offline) is one
command sent and answered through ``round_trip``. ``update`` names the revision it read, and
``show`` right after ``create`` sees it (same subject partition, in order). Leaves out the rules
(``pipeline.rules.commands.apply``) and the processor (``consumers.commands``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, Final, TextIO

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import timeout_option
from pipeline.cli.round_trip import complete_watcher_ids, report, send_command, subject_options
from pipeline.ops.validate import check_definition_text, load_definition
from pipeline.rules.commands import CommandVerb
from pipeline.rules.lifecycle import WatcherStatus

__all__ = ["watch"]

_LIST_COLUMNS: Final = ("watcher_id", "status", "version", "revision", "source_id")


def _summary(view: dict[str, Any]) -> str:
    return (
        f"{view['watcher_id']}: {view['status']} "
        f"(version {view['version']}, revision {view['revision']})"
    )


def _details(view: dict[str, Any]) -> str:
    lines = [_summary(view)]
    for name in ("tenant_id", "user_id", "source_id", "session_id", "created_at", "updated_at"):
        if view.get(name) is not None:
            lines.append(f"  {name}: {view[name]}")
    for name in ("activated_at", "closed_reason"):
        if view.get(name) is not None:
            lines.append(f"  {name}: {view[name]}")
    body = json.dumps(view.get("definition", {}), indent=2, sort_keys=True)
    lines.append("  definition: " + body.replace("\n", "\n  "))
    return "\n".join(lines)


def _table(result: dict[str, Any]) -> str:
    rows = [[str(w.get(c, "")) for c in _LIST_COLUMNS] for w in result.get("watchers", [])]
    if not rows:
        return "no watchers"
    header = [c.upper() for c in _LIST_COLUMNS]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


@click.group()
@timeout_option
@click.pass_context
def watch(ctx: click.Context, timeout: float) -> None:
    """Create, inspect and change watchers (through the command processor).

    \b
    Example:
      vigil watch create -f examples/release-build-failed.json --timeout 10
    """
    ctx.find_root().meta["vigil.timeout"] = timeout


def _definition_from(
    state: CliState, source: TextIO, tenant: str | None, user: str | None, proposal: bool = False
) -> dict[str, Any]:
    """The definition in ``source``, checked here first: every problem is printed as
    ``FILE:line:col: field: message (hint)`` and nothing is sent (exit 1)."""
    text = source.read()
    tenant_id, user_id = state.subject(tenant, user)
    findings = check_definition_text(
        text,
        _file_name(source),
        tenant_id=tenant_id,
        user_id=user_id,
        proposal=proposal,
    )
    if findings:
        for finding in findings:
            click.echo(str(finding), err=True)
        raise click.exceptions.Exit(1)
    return load_definition(text)


def _file_name(source: TextIO) -> str:
    name = getattr(source, "name", "-")
    return "<stdin>" if name in ("-", "<stdin>") else str(name)


@watch.command()
@click.option(
    "-f",
    "--file",
    "source",
    type=click.File("r", encoding="utf-8"),
    required=True,
    help="The definition, JSON or YAML ('-' for stdin).",
)
@subject_options
@pass_state
def create(
    state: CliState, source: TextIO, tenant: str | None, user: str | None, as_json: bool
) -> None:
    """Create a watcher (refused while one with the same id is live).

    The file is validated here first, as `vigil watch validate` does.

    \b
    Example:
      vigil watch create -f examples/release-build-failed.json
    """
    definition = _definition_from(state, source, tenant, user)
    result = send_command(state, CommandVerb.CREATE, tenant, user, definition=definition)
    report(result, as_json, lambda view: "created " + _summary(view))


@watch.command()
@click.option(
    "-f",
    "--file",
    "source",
    type=click.File("r", encoding="utf-8"),
    required=True,
    help="The new definition, JSON or YAML ('-' for stdin).",
)
@click.option(
    "--revision",
    type=click.IntRange(min=0),
    required=True,
    help="The revision you read (`vigil watch show`): refused unless it is still current.",
)
@subject_options
@pass_state
def update(
    state: CliState,
    source: TextIO,
    revision: int,
    tenant: str | None,
    user: str | None,
    as_json: bool,
) -> None:
    """Replace a live watcher's definition with a new version (compare-and-set).

    \b
    Example:
      vigil watch update -f examples/release-build-failed.json --revision 3
    """
    definition = _definition_from(state, source, tenant, user)
    result = send_command(
        state,
        CommandVerb.UPDATE,
        tenant,
        user,
        definition=definition,
        expected_revision=revision,
    )
    report(result, as_json, lambda view: "updated " + _summary(view))


@watch.command()
@click.option(
    "-f",
    "--file",
    "source",
    type=click.File("r", encoding="utf-8"),
    required=True,
    help="The agent watch, JSON or YAML ('-' for stdin).",
)
@subject_options
@pass_state
def propose(
    state: CliState, source: TextIO, tenant: str | None, user: str | None, as_json: bool
) -> None:
    """Propose a watch (state proposed; an identical live one answers with its id).

    \b
    Example:
      vigil watch propose -f examples/agent-proposal.json
    """
    definition = _definition_from(state, source, tenant, user, proposal=True)
    result = send_command(state, CommandVerb.PROPOSE, tenant, user, definition=definition)

    def render(view: dict[str, Any]) -> str:
        verb = "already proposed as" if view.get("collapsed") else "proposed"
        return f"{verb} {_summary(view)}"

    report(result, as_json, render)


@watch.command()
@click.argument("watcher_id", shell_complete=complete_watcher_ids)
@subject_options
@pass_state
def show(
    state: CliState, watcher_id: str, tenant: str | None, user: str | None, as_json: bool
) -> None:
    """Show one watcher: state, version, revision, definition.

    \b
    Example:
      vigil watch show release-build-failed --json
    """
    result = send_command(state, CommandVerb.SHOW, tenant, user, watcher_id=watcher_id)
    report(result, as_json, _details)


@watch.command("list")
@click.option(
    "--state",
    "status",
    type=click.Choice([s.value for s in WatcherStatus]),
    help="Only watchers in this state (default: the live ones).",
)
@click.option("--session", help="Only agent watches of this session.")
@subject_options
@pass_state
def list_cmd(
    state: CliState,
    status: str | None,
    session: str | None,
    tenant: str | None,
    user: str | None,
    as_json: bool,
) -> None:
    """List watchers of the subject.

    \b
    Example:
      vigil watch list --state paused
    """
    result = send_command(state, CommandVerb.LIST, tenant, user, state=status, session_id=session)
    report(result, as_json, _table)


def _lifecycle_command(verb: CommandVerb, done: str, help_text: str) -> click.Command:
    @click.argument("watcher_id", shell_complete=complete_watcher_ids)
    @click.option(
        "--revision",
        type=click.IntRange(min=0),
        help="Refuse unless the watcher is at this revision.",
    )
    @subject_options
    @pass_state
    def command(
        state: CliState,
        watcher_id: str,
        revision: int | None,
        tenant: str | None,
        user: str | None,
        as_json: bool,
    ) -> None:
        result = send_command(
            state, verb, tenant, user, watcher_id=watcher_id, expected_revision=revision
        )
        report(result, as_json, lambda view: f"{done} " + _summary(view))

    example = f"\b\nExample:\n  vigil watch {verb.value} release-build-failed --revision 3"
    return click.command(verb.value, help=f"{help_text}\n\n{example}")(command)


watch.add_command(
    _lifecycle_command(CommandVerb.APPROVE, "approved", "Approve a proposed watch (cap checked).")
)
watch.add_command(_lifecycle_command(CommandVerb.PAUSE, "paused", "Pause a watcher."))
watch.add_command(_lifecycle_command(CommandVerb.RESUME, "resumed", "Resume a paused watcher."))
watch.add_command(
    _lifecycle_command(CommandVerb.CANCEL, "cancelled", "Cancel a watcher (terminal).")
)


@watch.command()
@click.argument("paths", nargs=-1, type=click.File("r", encoding="utf-8"))
@click.option(
    "-f",
    "--file",
    "files",
    multiple=True,
    type=click.File("r", encoding="utf-8"),
    help="A definition to check, JSON or YAML ('-' for stdin); repeat for more.",
)
@click.option(
    "--proposal",
    is_flag=True,
    default=None,
    help="Check every file as an agent proposal (default: those with a window or session_id).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the problems as a JSON list.")
@pass_state
def validate(
    state: CliState,
    paths: tuple[TextIO, ...],
    files: tuple[TextIO, ...],
    proposal: bool | None,
    as_json: bool,
) -> None:
    """Check definition files offline (no broker): every problem at once, one line each,
    FILE:line:col: field.path: message (hint); exit 1 when there is any.

    \b
    Example:
      vigil watch validate examples/*.json examples/*.yaml
      vigil watch validate --json -f examples/agent-proposal.json
    """
    sources = (*files, *paths)
    if not sources:
        raise click.UsageError("name at least one file (-f FILE)")
    me = state.config.subject
    findings = []
    for source in sources:
        found = check_definition_text(
            source.read(),
            _file_name(source),
            tenant_id=me.tenant_id,
            user_id=me.user_id,
            proposal=proposal,
        )
        findings.extend(found)
        if not found and not as_json:
            click.echo(f"{_file_name(source)}: ok")
    if as_json:
        click.echo(json.dumps([asdict(f) for f in findings], indent=2))
    else:
        for finding in findings:
            click.echo(str(finding))
    if findings:
        raise click.exceptions.Exit(1)
