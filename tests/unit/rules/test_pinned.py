"""Registered states: a pinned evaluator's condition names only values it can report, refused at
proposal and again at approval, naming the allowed values."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pipeline.rules.agent_watch import AGENT_EVALUATORS
from pipeline.rules.commands import CommandVerb, ResultCode
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.definition_check import definition_problems
from pipeline.rules.errors import DefinitionError
from pipeline.rules.keys import canonical_json
from pipeline.rules.pinned import REGISTERED, check_registered_states
from producers.ticker.tools.pinned import PINNED
from tests.unit.rules.commands.test_apply import Subject, agent, agent_watch

pytestmark = pytest.mark.unit


def _definition(body: dict[str, Any]) -> WatcherDefinition:
    return WatcherDefinition.from_json(body, tenant_id="acme", user_id="u-42")


def test_every_agent_evaluator_declares_its_states_and_the_ticker_reads_that_field() -> None:
    assert frozenset(REGISTERED) == AGENT_EVALUATORS
    for spec in PINNED.values():
        assert spec.state_field == REGISTERED[spec.tool].field


@pytest.mark.parametrize(
    ("field", "condition"),
    [
        ("condition", {"eq": ["status", "succeded"]}),
        ("condition", {"all": [{"exists": "status"}, {"not": {"ne": ["status", "Failed"]}}]}),
        ("condition", {"contains": ["status", "succ"]}),
        ("condition", {"eq": ["status", 1]}),
        ("terminal_condition", {"any": [{"eq": ["status", "failed"]}, {"eq": ["status", "x"]}]}),
    ],
)
def test_a_misspelled_pinned_status_is_refused_naming_the_allowed_values(
    field: str, condition: dict[str, Any]
) -> None:
    body = agent_watch()
    body[field] = condition
    with pytest.raises(DefinitionError) as refused:
        check_registered_states(_definition(body))
    assert refused.value.field == field
    assert "queued, running, succeeded, failed, cancelled, timed_out" in refused.value.message


def test_registered_values_and_other_paths_pass() -> None:
    body = agent_watch()
    body["condition"] = {"all": [{"eq": ["status", "succeeded"]}, {"eq": ["commit", "anything"]}]}
    check_registered_states(_definition(body))
    session = agent_watch()
    session["source"] = {
        **session["source"],
        "tool": "agent.session.state@v1",
        "source_id": "session:s-1",
        "target": "s-1",
    }
    session["condition"] = {"eq": ["state", "waiting_for_input"]}
    session["terminal_condition"] = {"eq": ["state", "failed"]}
    check_registered_states(_definition(session))


def test_a_proposal_naming_an_unregistered_status_is_refused_at_proposal() -> None:
    subject = Subject()
    body = agent_watch()
    body["condition"] = {"eq": ["status", "succeded"]}
    outcome = subject.run(CommandVerb.PROPOSE, agent(), definition=body)
    assert outcome.result.error is not None
    assert (outcome.result.error.code, outcome.result.error.field) == (
        ResultCode.INVALID,
        "condition",
    )
    assert "succeeded" in outcome.result.error.message
    assert not outcome.registry


def test_a_stored_proposal_naming_an_unregistered_status_is_refused_at_approval() -> None:
    subject = Subject()
    subject.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch())
    stored = subject.view["aw-1"]
    body = stored.definition().to_json()
    body["condition"] = {"eq": ["status", "sucess"]}
    text = canonical_json(body, "definition").decode()
    subject.view["aw-1"] = replace(stored, definition_json=text)  # accepted by an older vigil
    code, field = subject.refused(CommandVerb.APPROVE, watcher_id="aw-1")
    assert (code, field) == (ResultCode.INVALID, "condition")


def test_watch_validate_names_the_allowed_values_for_a_proposal() -> None:
    body = agent_watch()
    body["terminal_condition"] = {"eq": ["status", "errored"]}
    problems = definition_problems(body, tenant_id="acme", user_id="u-42", proposal=True)
    assert [p.field for p in problems] == ["terminal_condition"]
    assert "timed_out" in problems[0].message
