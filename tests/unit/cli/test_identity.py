"""Who the CLI acts as: the configured subject as a user by default; an operator only when asked
for explicitly and configured; never more than the agent inside an agent run."""

from __future__ import annotations

import click
import pytest

from pipeline.cli.context import CliState
from pipeline.cli.identity import cli_principal
from pipeline.config import parse_config
from pipeline.rules.authz import Role

pytestmark = pytest.mark.unit


def state(as_operator: bool = False, operator: str | None = "alice") -> CliState:
    data = {"subject": {"tenant_id": "acme", "user_id": "u-1"}}
    if operator is not None:
        data["operator"] = {"name": operator}
    return CliState(None, as_operator, parse_config(data))


def test_by_default_the_cli_is_the_configured_subject_as_a_user() -> None:
    who = cli_principal(state(), environ={})
    assert (who.role, who.tenant_id, who.user_id) == (Role.USER, "acme", "u-1")


@pytest.mark.parametrize("kind", ["operator_verb", "other_subject"])
def test_an_operator_action_needs_as_operator_and_a_configured_identity(kind: str) -> None:
    with pytest.raises(click.UsageError, match="--as-operator"):
        cli_principal(state(), environ={}, **{kind: True})
    with pytest.raises(click.UsageError, match=r"\[operator\] name"):
        cli_principal(state(True, operator=None), environ={}, **{kind: True})
    who = cli_principal(state(True), environ={}, **{kind: True})
    assert (who.role, who.name) == (Role.OPERATOR, "operator:alice")


def test_inside_an_agent_run_the_cli_is_the_agent_and_never_an_operator() -> None:
    env = {"VIGIL_AGENT_TOKEN": "t", "VIGIL_SESSION_ID": "agent-run-1"}
    who = cli_principal(state(), environ=env)
    assert (who.role, who.session_id) == (Role.AGENT, "agent-run-1")
    for kwargs in ({"operator_verb": True}, {"other_subject": True}):
        with pytest.raises(click.UsageError, match="agent run may not act as an operator"):
            cli_principal(state(True), environ=env, **kwargs)
