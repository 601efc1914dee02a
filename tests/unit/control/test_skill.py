"""The agent skill reaches every agent run: ``[agent] skill`` or the shipped docs/agent-skill.md
(package data, so a pip install has it), named by ``VIGIL_SKILL``."""

from __future__ import annotations

import tomllib
from datetime import timedelta
from pathlib import Path

import pytest

from pipeline.config import parse_config
from pipeline.control.agent import AgentRunner, AgentTokens
from pipeline.control.skill import SHIPPED_SKILL, shipped_skill, skill_path
from pipeline.rules.errors import ConfigError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


def test_the_shipped_skill_is_docs_agent_skill_and_package_data() -> None:
    shipped = shipped_skill()
    assert shipped.read_text() == (ROOT / "docs" / "agent-skill.md").read_text()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert SHIPPED_SKILL in package_data["package-data"]["pipeline.control"]
    assert skill_path(None) == shipped.resolve()


def test_a_configured_skill_wins_and_a_missing_one_refuses_to_start(tmp_path: Path) -> None:
    mine = tmp_path / "skill.md"
    mine.write_text("# my skill\n")
    config = parse_config({"agent": {"skill": str(mine)}})
    assert skill_path(config.agent.skill) == mine.resolve()
    assert parse_config({}).agent.skill is None
    with pytest.raises(ConfigError, match=r"\[agent\] skill"):
        skill_path(tmp_path / "gone.md")


def test_every_agent_run_gets_the_skill_in_vigil_skill(tmp_path: Path) -> None:
    agent = tmp_path / "agent.sh"
    agent.write_text('#!/bin/sh\nhead -n 1 "$VIGIL_SKILL"\n')
    agent.chmod(0o700)
    runner = AgentRunner(
        [str(agent)],
        timedelta(seconds=10),
        tmp_path / "s.sock",
        AgentTokens("t", "u"),
        environ={"PATH": "/usr/bin:/bin"},
        skill=skill_path(None),
    )
    assert runner.ask("what can you do?", "me") == "# Skill: driving vigil from an agent"
