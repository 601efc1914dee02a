"""vigil stays readable one file at a time: no class in ``pipeline/runtime`` with more than 15
methods, no ``if TYPE_CHECKING:`` stubs of a host's methods there, and no module over 400 lines
or function over 60 lines anywhere in ``pipeline``, ``consumers`` and ``producers`` (a module
that must be longer says why in its first line, ``# longer than 400 lines: <why>``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = sorted((ROOT / "pipeline" / "runtime").glob("*.py"))
BOUNDED = sorted(
    path
    for package in ("pipeline", "consumers", "producers")
    for path in (ROOT / package).rglob("*.py")
)
LONG_MODULE = "# longer than 400 lines: "
MAX_METHODS = 15
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_no_runtime_class_has_more_than_fifteen_methods() -> None:
    crowded = [
        f"{_name(path)}:{node.name} ({count})"
        for path in RUNTIME
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.ClassDef)
        and (
            count := sum(
                isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) for item in node.body
            )
        )
        > MAX_METHODS
    ]
    assert crowded == []


def test_no_runtime_module_stubs_a_hosts_methods_for_the_type_checker() -> None:
    stubbed = [
        _name(path)
        for path in RUNTIME
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    ]
    assert stubbed == []


def _unexplained_length(path: Path) -> int | None:
    """The module's line count when it is too long and its first line does not say why."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if len(lines) <= MAX_MODULE_LINES:
        return None
    why = lines[0].removeprefix(LONG_MODULE)
    return None if why != lines[0] and why.strip() else len(lines)


def test_the_size_checks_cover_every_module() -> None:
    assert len(BOUNDED) > 200
    assert ROOT / "pipeline" / "cli" / "main.py" in BOUNDED
    assert ROOT / "producers" / "publish" / "publisher.py" in BOUNDED


def test_a_long_module_is_accepted_only_when_its_first_line_says_why(tmp_path: Path) -> None:
    body = ["x = 1"] * MAX_MODULE_LINES
    silent, empty, explained = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    silent.write_text("\n".join(["# a long one", *body]), encoding="utf-8")
    empty.write_text("\n".join([LONG_MODULE, *body]), encoding="utf-8")
    explained.write_text("\n".join([LONG_MODULE + "one generated table", *body]), "utf-8")
    assert _unexplained_length(silent) == MAX_MODULE_LINES + 1
    assert _unexplained_length(empty) == MAX_MODULE_LINES + 1
    assert _unexplained_length(explained) is None


def test_no_module_or_function_is_over_its_size() -> None:
    long_modules = [
        f"{_name(path)} ({lines})"
        for path in BOUNDED
        if (lines := _unexplained_length(path)) is not None
    ]
    long_functions = [
        f"{_name(path)}:{node.name} ({length})"
        for path in BOUNDED
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES
    ]
    assert long_modules == [] and long_functions == []
