"""The JSON Schemas generated from the models: checked in as printed, valid 2020-12, every
example passes, a few known mistakes fail, and never a definition the rules accept."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.cli.group import vigil
from pipeline.ops.json_schema import SCHEMAS
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError
from tests.unit.rules.test_definition import DESIGN_EXAMPLE

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
WATCHER = jsonschema.Draft202012Validator(SCHEMAS["watcher"]())
EVENT = jsonschema.Draft202012Validator(SCHEMAS["event"]())


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_checked_in_schema_is_what_vigil_schema_prints(name: str) -> None:
    result = CliRunner().invoke(vigil, ["schema", name])
    assert result.exit_code == 0
    checked_in = (ROOT / "docs" / "schemas" / f"{name}.json").read_text(encoding="utf-8")
    assert json.loads(result.stdout) == json.loads(checked_in), (
        f"regenerate: vigil schema {name} > docs/schemas/{name}.json"
    )
    jsonschema.Draft202012Validator.check_schema(json.loads(checked_in))


def _examples() -> list[Path]:
    return sorted(p for p in (ROOT / "examples").iterdir() if p.suffix in (".json", ".yaml"))


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.name)
def test_every_example_passes_the_watcher_schema(path: Path) -> None:
    body = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert list(WATCHER.iter_errors(body)) == []


def test_example_events_pass_the_event_schema() -> None:
    lines = (ROOT / "examples" / "events.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines and all(not list(EVENT.iter_errors(json.loads(line))) for line in lines)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"mode": "sometimes"}, "mode"),
        ({"condition": {"eqq": ["a", 1]}}, "condition"),
        ({"condition": {"all": [{"eq": ["a", 1], "ne": ["b", 2]}]}}, "condition"),
        ({"retry": {"base": "five seconds"}}, "retry"),
        ({"colour": "red"}, ""),
    ],
)
def test_known_mistakes_fail_the_schema(change: dict[str, Any], where: str) -> None:
    body = {**copy.deepcopy(DESIGN_EXAMPLE), **change}
    errors = list(WATCHER.iter_errors(body))
    assert errors and any(
        str(e.absolute_path[0] if e.absolute_path else "") == where for e in errors
    )


_leaf = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["5m", "x", "a.b", ""])
_json = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["eq", "all", "not", "exists", "window", "base"]), inner, max_size=2
        )
    ),
    max_leaves=6,
)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(WatcherDefinition.model_fields)), _json, max_size=3))
def test_schema_never_refuses_a_definition_the_rules_accept(changes: dict[str, Any]) -> None:
    body = {**copy.deepcopy(DESIGN_EXAMPLE), **changes}
    try:
        WatcherDefinition.from_json(body, tenant_id="acme", user_id="u-42")
    except DefinitionError:
        return
    assert list(WATCHER.iter_errors({k: v for k, v in body.items() if v is not None})) == []
