"""definition_problems: every problem of a body at once, each with a hint where one helps, and
exactly the bodies ``WatcherDefinition.from_json`` refuses."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.definition_check import definition_problems
from pipeline.rules.errors import DefinitionError
from tests.subject import SubjectKeywords
from tests.unit.rules.test_definition import DESIGN_EXAMPLE

pytestmark = pytest.mark.unit

SUBJECT: SubjectKeywords = {"tenant_id": "acme", "user_id": "u-42"}


def _broken(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(DESIGN_EXAMPLE)
    for name, value in changes.items():
        if "." in name:
            top, leaf = name.split(".")
            body[top][leaf] = value
        else:
            body[name] = value
    return body


def test_design_example_has_no_problem() -> None:
    assert definition_problems(DESIGN_EXAMPLE, **SUBJECT) == []


def test_four_problems_in_four_sections_are_all_reported_with_their_fields() -> None:
    body = _broken(
        mode="sometimes",
        **{"source.max_age": "ten minutes"},
        condition={"all": [{"eqq": ["status", "failed"]}]},
        privacyy={},
    )
    problems = definition_problems(body, **SUBJECT)
    assert sorted(p.field or "" for p in problems) == [
        "condition.all[0]",
        "mode",
        "privacyy",
        "source.max_age",
    ]
    unknown = next(p for p in problems if p.field == "privacyy")
    assert unknown.message == "unknown field" and unknown.hint == "did you mean 'privacy'?"


def test_a_cross_section_rule_is_reported_once_the_sections_are_valid() -> None:
    body = _broken(delivery={"target": "ops-hook", "verb": "send"})
    problems = definition_problems(body, **SUBJECT)
    assert [(p.field, p.message) for p in problems] == [("delivery.text", "verb send needs text")]


def test_a_missing_required_field_is_reported_once() -> None:
    body = copy.deepcopy(DESIGN_EXAMPLE)
    del body["delivery"]
    body["mode"] = "twice"
    fields = [p.field or "" for p in definition_problems(body, **SUBJECT)]
    assert sorted(fields) == ["delivery", "mode"]


def test_a_proposal_is_held_to_agent_bounds() -> None:
    problems = definition_problems(DESIGN_EXAMPLE, **SUBJECT, proposal=True)
    assert problems and all(p.field is not None for p in problems)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_sections = st.sampled_from(sorted(WatcherDefinition.model_fields))


@settings(max_examples=150, derandomize=True, deadline=None)
@given(st.dictionaries(_sections, _json, max_size=4))
def test_problems_are_empty_exactly_when_from_json_accepts(changes: dict[str, Any]) -> None:
    body = {**copy.deepcopy(DESIGN_EXAMPLE), **changes}
    problems = definition_problems(body, **SUBJECT)
    try:
        WatcherDefinition.from_json(body, **SUBJECT)
    except DefinitionError as exc:
        assert problems, "from_json refused what definition_problems let pass"
        assert exc.field in {p.field for p in problems} or exc.field is None
    else:
        assert problems == []
