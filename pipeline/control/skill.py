"""The agent skill: the page that teaches an agent to drive vigil, handed to every agent run.

Owns where the page is — ``[agent] skill``, or the copy shipped with vigil
(``docs/agent-skill.md``, installed as package data of ``pipeline.control`` so a pip install has
it too) — and the variable that names it to the agent, ``VIGIL_SKILL``. A harness passes it to
its agent as a system prompt (README: *Agents*). Starting agents is ``agent``'s; what the page
says is the page's.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Final

from pipeline.rules.errors import ConfigError

__all__ = ["ENV_SKILL", "SHIPPED_SKILL", "shipped_skill", "skill_path"]

ENV_SKILL: Final = "VIGIL_SKILL"
SHIPPED_SKILL: Final = "agent-skill.md"  # package data of pipeline.control: docs/agent-skill.md


def shipped_skill() -> Path:
    """The skill vigil ships (``docs/agent-skill.md``), wherever vigil is installed."""
    return Path(str(files("pipeline.control").joinpath(SHIPPED_SKILL)))


def skill_path(configured: Path | None) -> Path:
    """The skill every agent run gets: ``[agent] skill``, else the shipped one. A page that is
    not there is a :class:`ConfigError` at start, never an agent run without its skill."""
    path = shipped_skill() if configured is None else configured.expanduser()
    if not path.is_file():
        where = "the shipped skill" if configured is None else "[agent] skill"
        raise ConfigError(f"{where}: {path} is not a readable file")
    return path.resolve()
