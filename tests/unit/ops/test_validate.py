"""Offline checks placed in their files: definitions (JSON and YAML) and event lines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipeline.ops.validate import Finding, check_definition_text, check_event_line
from tests.subject import SubjectKeywords

pytestmark = pytest.mark.unit

SUBJECT: SubjectKeywords = {"tenant_id": "local", "user_id": "me"}
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

FOUR_WRONG = """{
  "watcher_id": "w-1",
  "purpose": "ops.alert",
  "mode": "sometimes",
  "source": {"kind": "event", "source_id": "ci", "event_type": "build.finished",
             "max_age": "ten minutes"},
  "condition": {"all": [{"eqq": ["status", "failed"]}]},
  "delivery": {"target": "ops-hook"},
  "expires_at": "2099-01-01T00:00:00Z",
  "privacyy": {}
}
"""


def test_four_problems_are_four_findings_in_file_order_with_line_and_column() -> None:
    found = check_definition_text(FOUR_WRONG, "w.json", **SUBJECT)
    assert [(f.line, f.column, f.field) for f in found] == [
        (4, 11, "mode"),
        (6, 25, "source.max_age"),
        (7, 25, "condition.all[0]"),
        (10, 3, "privacyy"),
    ]
    assert str(found[3]) == "w.json:10:3: privacyy: unknown field (did you mean 'privacy'?)"


def test_truncated_json_is_reported_as_json_with_the_file_name() -> None:
    found = check_definition_text(FOUR_WRONG[:120], "cut.json", **SUBJECT)
    assert len(found) == 1
    assert str(found[0]).startswith("cut.json:") and "not JSON" in found[0].message
    assert "YAML" not in found[0].message


def test_yaml_definition_is_placed_by_its_lines() -> None:
    text = (
        "watcher_id: w-1\npurpose: ops.alert\nsource:\n  kind: event\n  source_id: ci\n"
        "  event_type: x\n  max_age: 10 minutes\ncondition: {exists: a}\n"
        "delivery: {target: ops-hook}\nexpires_at: 2099-01-01T00:00:00Z\n"
    )
    found = check_definition_text(text, "w.yaml", **SUBJECT)
    assert [(f.line, f.field) for f in found] == [(7, "source.max_age")]


def test_broken_yaml_names_the_line() -> None:
    found = check_definition_text("a: [1, 2\nb: 3\n", "w.yaml", **SUBJECT)
    assert len(found) == 1 and found[0].line >= 2 and "neither JSON nor YAML" in found[0].message


def _event(observed_at: str, extra: str = "") -> str:
    return (
        '{"source_id": "ci", "event_type": "build.finished", "event_id": "b-1", '
        f'"observed_at": "{observed_at}"{extra}}}'
    )


def test_event_line_reports_every_problem_on_its_line() -> None:
    text = '{"source_id": 1, "event_type": "t", "observed_at": "x", "colour": 1}'
    found, event = check_event_line(text, "e.jsonl", 7, now=NOW)
    assert event is None
    assert {f.field for f in found} == {"source_id", "event_id", "colour"}
    assert all(f.line == 7 and not f.warning for f in found)


@pytest.mark.parametrize(
    ("observed_at", "max_age", "warned"),
    [
        ("2026-12-01T12:00:00Z", None, False),
        ("2099-01-01T00:00:00Z", None, True),
        ("2001-01-01T00:00:00Z", None, True),
        ("2026-12-01T11:00:00Z", None, False),
        ("2026-12-01T11:00:00Z", timedelta(minutes=10), True),
        ("2026-12-01T12:00:20Z", None, False),
    ],
)
def test_observed_at_outside_the_known_window_is_a_warning_not_a_refusal(
    observed_at: str, max_age: timedelta | None, warned: bool
) -> None:
    found, event = check_event_line(_event(observed_at), "-", 1, now=NOW, max_age=max_age)
    assert event is not None
    assert [f.warning for f in found] == ([True] if warned else [])
    assert all(isinstance(f, Finding) and f.field == "observed_at" for f in found)
