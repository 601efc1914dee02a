"""One command to the command processor and back, as every watcher-side CLI verb sends it.

Owns :func:`send_command` (as the configured ``[subject]``, or for another subject with
``--subject``, an operator action), :func:`report` (the result, or one ``Error: <field>: <message>
[<code>]`` line and exit 1; ``--json`` the result object), the shared options and the watcher-id
completer. Leaves out which command each verb builds (the ``*_cmd`` modules) and the client
(:class:`pipeline.control.client.CommandClient`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.shell_completion import CompletionItem

from pipeline.cli.completion_cmd import ASK_TIMEOUT_S, cli_state, matching
from pipeline.cli.context import CliState
from pipeline.cli.identity import cli_principal
from pipeline.cli.options import subject_option
from pipeline.control.client import DEFAULT_TIMEOUT_S, CommandClient
from pipeline.rules.authz import Principal
from pipeline.rules.commands import CommandResult, CommandVerb

__all__ = ["complete_watcher_ids", "report", "send_command", "subject_options"]

F = TypeVar("F", bound=Callable[..., Any])


def subject_options(command: F) -> F:
    """``--subject TENANT/USER`` (operators acting for another subject) and ``--json``."""
    command = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")(
        command
    )
    return subject_option(help="Act for this subject (operators: --as-operator).")(command)


def send_command(
    cli: CliState,
    verb: CommandVerb,
    tenant: str | None,
    user: str | None,
    /,
    operator_verb: bool = False,
    **fields: Any,
) -> CommandResult:
    """Send one command as the CLI's principal (``cli_principal``) and wait for its result."""
    if (tenant is None) != (user is None):
        raise click.UsageError("--subject names a tenant and a user: TENANT/USER")
    me = cli.config.subject
    other = tenant is not None and (tenant, user) != (me.tenant_id, me.user_id)
    principal = cli_principal(cli, operator_verb=operator_verb, other_subject=other)
    return _ask(cli, _timeout(), verb, principal, *cli.subject(tenant, user), **fields)


def _ask(
    cli: CliState,
    timeout: float,
    verb: CommandVerb,
    principal: Principal,
    tenant: str,
    user: str,
    **fields: Any,
) -> CommandResult:
    config = cli.config
    keks = config.privacy.keks()  # first: a missing KEK is one line and no broker round trip
    cli.reach_kafka()
    with CommandClient(
        config.kafka.bootstrap_servers,
        config.kafka.topology(),
        timeout_s=timeout,
        keks=keks,
    ) as client:
        return client.send(client.command(verb, principal, tenant, user, **fields))


def complete_watcher_ids(
    ctx: click.Context, _param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The subject's live watcher ids, from the command processor; none when it does not
    answer in time (``vigil completion``)."""
    try:
        state = cli_state(ctx)
        me = state.config.subject
        principal = cli_principal(state, operator_verb=False, other_subject=False)
        result = _ask(state, ASK_TIMEOUT_S, CommandVerb.LIST, principal, me.tenant_id, me.user_id)
        watchers: list[dict[str, Any]] = (result.result or {}).get("watchers", [])
        return matching([str(w["watcher_id"]) for w in watchers], incomplete)
    except Exception:  # a completer completes nothing rather than break the shell
        return []


def _timeout() -> float:
    found = click.get_current_context().find_root().meta.get("vigil.timeout")
    return float(found) if found is not None else DEFAULT_TIMEOUT_S


def report(result: CommandResult, as_json: bool, render: Callable[[dict[str, Any]], str]) -> None:
    """Print the result (or one error line) and exit 1 on a refusal."""
    if as_json:
        click.echo(json.dumps(result.as_json(), indent=2, sort_keys=True))
    elif result.ok:
        click.echo(render(result.result or {}))
    if result.error is not None:
        if not as_json:
            error = result.error
            where = f"{error.field}: " if error.field else ""
            click.echo(f"Error: {where}{error.message} [{error.code.value}]", err=True)
        raise click.exceptions.Exit(1)
