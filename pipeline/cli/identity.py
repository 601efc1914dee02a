"""Who the ``vigil`` CLI acts as when it sends a command over Kafka (DESIGN.md §10).

Owns :func:`cli_principal`: the configured ``[subject]`` as a user; operator verbs need both
``--as-operator`` and ``[operator] name``; inside an agent run (``$VIGIL_AGENT_TOKEN``) the agent of
``$VIGIL_SESSION_ID``, never an operator. Best effort alone: ``[agent] run_as`` and Kafka ACLs on
``commands`` make it hold. Left out: the commands and what each principal may do."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

import click

from pipeline.cli.context import CliState
from pipeline.control.agent import ENV_AGENT_TOKEN, ENV_SESSION_ID, agent_principal
from pipeline.control.client import operator_principal
from pipeline.rules.authz import Principal, Role

__all__ = ["cli_principal"]

_UNKNOWN_SESSION: Final = "agent-cli"


def cli_principal(
    cli: CliState,
    *,
    operator_verb: bool = False,
    other_subject: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Principal:
    """The principal one CLI command asserts; a :class:`click.UsageError` when it may not act
    as it asks."""
    env = os.environ if environ is None else environ
    me = cli.config.subject
    wants_operator = cli.as_operator or operator_verb or other_subject
    if env.get(ENV_AGENT_TOKEN):
        if wants_operator:
            raise click.UsageError("an agent run may not act as an operator")
        session = env.get(ENV_SESSION_ID) or _UNKNOWN_SESSION
        return agent_principal(me.tenant_id, me.user_id, session, name="agent-cli")
    if not wants_operator:
        return Principal(
            name=f"cli:{me.tenant_id}/{me.user_id}",
            role=Role.USER,
            tenant_id=me.tenant_id,
            user_id=me.user_id,
        )
    what = "acting for another subject" if other_subject else "this"
    if not cli.as_operator:
        raise click.UsageError(
            f"{what} is an operator action: run `vigil --as-operator …` (the CLI acts as your "
            "[subject] by default)"
        )
    name = cli.config.operator.name
    if name is None:
        raise click.UsageError(
            "no operator identity is configured: set [operator] name in vigil.toml"
        )
    return operator_principal(me.tenant_id, me.user_id, name=f"operator:{name}")
