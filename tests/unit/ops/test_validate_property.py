"""``vigil watch validate`` under hostile files (DESIGN.md §10 "Hostile input"): a hypothesis
property over generated and mutated definitions written as JSON, as YAML, cut short, nested
past any bound or as YAML aliases that expand exponentially. Every file is either ``ok`` or a
list of findings, each placed (line and column from 1) with a message; never an exception. The
command itself, fed through stdin, exits 0 or 1 and never with a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.cli.group import vigil
from pipeline.ops.validate import check_definition_text
from tests.subject import SubjectKeywords
from tests.unit.rules.commands.test_hostile_commands import TEMPLATES, mutated

pytestmark = pytest.mark.unit

SUBJECT: SubjectKeywords = {"tenant_id": "acme", "user_id": "u-42"}
NO_BROKER = '[kafka]\nbootstrap_servers = "127.0.0.1:1"\n'
# A YAML file of a few hundred bytes whose aliases expand to 10^9 strings if copied.
LAUGHS = "a: &a ['lol','lol','lol','lol','lol','lol','lol','lol','lol','lol']\n" + "".join(
    f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join(['*' + chr(97 + n)] * 10)}]\n" for n in range(8)
)


@st.composite
def definition_files(draw: st.DrawFn) -> str:
    """A definition as a user may have written it, honest or hostile."""
    data = draw(st.data())
    body: Any = mutated(data, dict(draw(st.sampled_from(TEMPLATES))))
    how = draw(
        st.sampled_from(["json"] * 5 + ["yaml"] * 4 + ["cut", "deep", "laughs", "junk", "flow"])
    )
    if how == "yaml":
        return str(yaml.safe_dump(json.loads(json.dumps(body, allow_nan=True)), sort_keys=False))
    text = json.dumps(body, allow_nan=True, indent=2)
    if how == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if how == "deep":
        opener = draw(st.sampled_from(["[", '{"a":', "- ", "a: ["]))
        return opener * draw(st.sampled_from([70, 5_000, 100_000]))
    if how == "laughs":
        return LAUGHS + "watcher_id: *i\n"
    if how == "junk":
        return draw(st.text(max_size=80))
    if how == "flow":  # YAML flow style that is not JSON
        return text.replace('"', "")
    return text


@pytest.mark.slow
@settings(
    max_examples=300,
    deadline=None,  # no absolute timings in tests (bounds are in the parser: sizes, depth)
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(text=definition_files())
def test_every_definition_file_is_ok_or_findings_placed_with_a_message(text: str) -> None:
    findings = check_definition_text(text, "w.yaml", **SUBJECT, proposal=None)
    for finding in findings:
        assert finding.line >= 1 and finding.column >= 1
        assert finding.message
        assert str(finding).startswith("w.yaml:")


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("validate") / "vigil.toml"
    path.write_text(NO_BROKER, encoding="utf-8")
    return path


@settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(text=definition_files())
def test_the_command_exits_0_or_1_and_never_with_a_traceback(config: Path, text: str) -> None:
    args = ["--config", str(config), "watch", "validate", "--json", "-f", "-"]
    result = CliRunner().invoke(vigil, args, input=text)
    assert result.exit_code in (0, 1), (result.exit_code, result.output[-500:], result.exception)
    assert "Traceback" not in result.output
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit)
    findings = json.loads(result.stdout)
    assert (result.exit_code == 1) == bool(findings)


def test_the_hostile_shapes_are_reached_and_each_is_a_finding() -> None:
    """Not vacuous: a deep JSON file (the C decoder's own recursion limit, which once escaped
    as a traceback), deep YAML and exponential aliases are each one placed finding."""
    for text in ("[" * 100_000 + "]" * 100_000, "a: [" * 100_000, LAUGHS + "watcher_id: *i\n"):
        findings = check_definition_text(text, "w.json", **SUBJECT)
        assert findings and all(f.message for f in findings), text[:40]
