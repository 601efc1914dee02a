"""Module docstrings state contracts: every module under ``pipeline``, ``consumers`` and
``producers`` opens with a docstring of 1 to 6 non-blank lines (what it owns, what it leaves to
others; design rationale lives in ``docs/architecture.md``), and no code file cites the style
guide's habit numbers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(
    path
    for package in ("pipeline", "consumers", "producers")
    for path in (ROOT / package).rglob("*.py")
)
MAX_DOCSTRING_LINES = 6
_HABIT = re.compile(r"\bhabits?\s*#?\d+|\bSTYLE(?:\.md)?\s*§", re.IGNORECASE)


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _docstring_lines(path: Path) -> int:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return sum(1 for line in (docstring or "").splitlines() if line.strip())


def test_every_module_docstring_is_a_contract_of_one_to_six_lines() -> None:
    offenders = [
        f"{_name(path)} ({lines})"
        for path in MODULES
        if not 1 <= (lines := _docstring_lines(path)) <= MAX_DOCSTRING_LINES
    ]
    assert offenders == [], "module docstrings outside 1-6 non-blank lines:\n" + "\n".join(
        offenders
    )


def test_no_code_cites_the_style_guides_habit_numbers() -> None:
    citing = [
        f"{_name(path)}:{number}"
        for path in MODULES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _HABIT.search(line)
    ]
    assert citing == [], "style-guide habit numbers cited in code:\n" + "\n".join(citing)


def test_the_habit_pattern_finds_a_citation_and_spares_plain_words() -> None:
    assert _HABIT.search("# see habit 22") and _HABIT.search("(STYLE.md § 7)")
    assert not _HABIT.search("a habit of retrying") and not _HABIT.search("DESIGN.md §10")
