"""The stream runtime stays readable one file at a time: no class in ``pipeline/runtime`` with
more than 15 methods, no ``if TYPE_CHECKING:`` stubs of a host's methods there, and no module
over 400 lines or function over 60 lines in the runtime, the stage loops and the Kafka clients."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = sorted((ROOT / "pipeline" / "runtime").glob("*.py"))
BOUNDED = [
    *RUNTIME,
    *sorted((ROOT / "consumers").glob("*/*.py")),
    *sorted((ROOT / "producers" / "ticker").glob("*.py")),
    ROOT / "pipeline" / "kafka" / "clients.py",
]
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


def test_runtime_stage_loops_and_clients_keep_to_their_sizes() -> None:
    long_modules = [
        f"{_name(path)} ({lines})"
        for path in BOUNDED
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    long_functions = [
        f"{_name(path)}:{node.name} ({length})"
        for path in BOUNDED
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES
    ]
    assert long_modules == [] and long_functions == []
