"""``vigil grant add|list|revoke``: grants as records, written by the command processor.

Operator verbs (DESIGN.md §9, ``vigil --as-operator grant …``): ``add`` prints the new id, ``list``
every grant (``--tenant/--user`` narrow it), ``revoke`` an id, or a subject and a source (a grant
naming more sources loses that one). Results, errors and ``--json`` as in ``vigil watch``. Left out:
the rules (``pipeline.rules.commands.apply``) and the round trip."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import subject_option, timeout_option
from pipeline.cli.round_trip import report, send_command
from pipeline.rules.authz import Action
from pipeline.rules.commands import CommandVerb, GrantSpec
from pipeline.rules.durations import parse_duration
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import parse_instant

__all__ = ["grant", "parse_until"]


def parse_until(text: str, now: datetime) -> datetime:
    """An RFC 3339 instant, or a duration from ``now`` (``30d``)."""
    try:
        return parse_instant(text, "until")
    except DefinitionError:
        try:
            return now + parse_duration(text, "until")
        except DefinitionError:
            raise DefinitionError(
                "expected an RFC 3339 instant (2027-01-01T00:00:00Z) or a duration (30d)", "until"
            ) from None


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    """Repeated options and comma lists alike: ``--source a,b --source c``."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def _row(view: dict[str, Any]) -> str:
    parts = [
        view["grant_id"],
        f"{view['tenant_id']}/{view['user_id']}",
        view["purpose"],
        "sources=" + ",".join(view["sources"]),
    ]
    if view["tools"]:
        parts.append("tools=" + ",".join(view["tools"]))
    if view["targets"]:
        parts.append("targets=" + ",".join(view["targets"]))
    parts += ["actions=" + ",".join(view["actions"]), f"until={view['until']}"]
    return "  ".join(parts)


@click.group()
@timeout_option
@click.pass_context
def grant(ctx: click.Context, timeout: float) -> None:
    """Add, list and revoke grants (operators: vigil --as-operator grant …).

    \b
    Example:
      vigil --as-operator grant list --json
    """
    ctx.find_root().meta["vigil.timeout"] = timeout


@grant.command()
@subject_option(required=True, help="The subject the grant is for.")
@click.option("--purpose", required=True, help="The purpose it allows, e.g. ops.alert.")
@click.option("--source", "sources", multiple=True, required=True, help="A source id (repeat).")
@click.option("--tool", "tools", multiple=True, help="A governed tool (repeat).")
@click.option("--target", "targets", multiple=True, help="A delivery target (repeat).")
@click.option(
    "--actions",
    required=True,
    help="Comma list of " + ", ".join(a.value for a in Action) + ".",
)
@click.option("--until", required=True, help="RFC 3339 instant, or a duration from now (30d).")
@click.option("--json", "as_json", is_flag=True, help="Print the grant as JSON.")
@pass_state
def add(
    state: CliState,
    tenant: str,
    user: str,
    purpose: str,
    sources: tuple[str, ...],
    tools: tuple[str, ...],
    targets: tuple[str, ...],
    actions: str,
    until: str,
    as_json: bool,
) -> None:
    """Grant a subject a purpose over sources (nothing unnamed is granted); prints its id.

    \b
    Example:
      vigil --as-operator grant add --subject local/me --purpose ops.alert \\
        --source ci.pipeline --target ops-hook --actions evaluate,deliver,manage --until 30d
    """
    try:
        wanted = tuple(Action(a) for a in _split((actions,)))
    except ValueError:
        raise click.BadParameter(
            "choose from " + ", ".join(a.value for a in Action), param_hint="--actions"
        ) from None
    try:
        spec = GrantSpec(
            tenant_id=tenant,
            user_id=user,
            purpose=purpose,
            sources=_split(sources),
            tools=_split(tools),
            targets=_split(targets),
            actions=wanted,
            until=parse_until(until, datetime.now(UTC)),
        )
    except DefinitionError:
        raise
    except ValueError as exc:  # pydantic's ValidationError: name the first field
        raise click.BadParameter(str(exc).splitlines()[-1]) from None
    result = send_command(
        state, CommandVerb.GRANT_ADD, tenant, user, operator_verb=True, grant=spec
    )
    report(result, as_json, lambda view: str(view["grant_id"]))


@grant.command("list")
@click.option("--tenant", help="Only this tenant's grants.")
@click.option("--user", help="Only this user's grants (with --tenant).")
@click.option("--json", "as_json", is_flag=True, help="Print the grants as JSON.")
@pass_state
def list_cmd(state: CliState, tenant: str | None, user: str | None, as_json: bool) -> None:
    """List grants.

    \b
    Example:
      vigil --as-operator grant list --tenant local --user me
    """
    result = send_command(state, CommandVerb.GRANT_LIST, None, None, operator_verb=True)
    if result.result is not None and (tenant is not None or user is not None):
        kept = [
            g
            for g in result.result["grants"]
            if (tenant is None or g["tenant_id"] == tenant)
            and (user is None or g["user_id"] == user)
        ]
        result = result.model_copy(update={"result": {"grants": kept}})

    def render(body: dict[str, Any]) -> str:
        rows = [_row(view) for view in body.get("grants", [])]
        return "\n".join(rows) if rows else "no grants"

    report(result, as_json, render)


@grant.command()
@click.option("--id", "grant_id", help="The grant to revoke.")
@subject_option(help="With --source: revoke that source for this subject.")
@click.option("--source")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_state
def revoke(
    state: CliState,
    grant_id: str | None,
    tenant: str | None,
    user: str | None,
    source: str | None,
    as_json: bool,
) -> None:
    """Revoke a grant by id, or a source of one subject.

    \b
    Example:
      vigil --as-operator grant revoke --id g-0123abcd
    """
    by_subject = (tenant, user, source)
    if grant_id is not None and any(v is not None for v in by_subject):
        raise click.UsageError("give --id, or --subject and --source, not both")
    if grant_id is None and any(v is None for v in by_subject):
        raise click.UsageError("give --id, or --subject TENANT/USER and --source")
    result = send_command(
        state,
        CommandVerb.GRANT_REVOKE,
        tenant,
        user,
        operator_verb=True,
        grant_id=grant_id,
        source_id=source,
    )

    def render(body: dict[str, Any]) -> str:
        lines = [f"revoked {gid}" for gid in body.get("revoked", [])]
        lines += [f"narrowed {gid} (without {source})" for gid in body.get("narrowed", [])]
        return "\n".join(lines)

    report(result, as_json, render)
