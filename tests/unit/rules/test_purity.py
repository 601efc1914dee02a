"""Modules in pipeline/rules/ are pure: no Kafka, no Redis, no clock, no wall time."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

RULES = Path(__file__).resolve().parents[3] / "pipeline" / "rules"
FORBIDDEN_MODULES = ("confluent_kafka", "redis", "pipeline.clock")
FORBIDDEN_CALLS = {
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
    ("time", "time"),
    ("time", "time_ns"),
    ("time", "monotonic"),
    ("time", "perf_counter"),
}


def _rule_modules() -> list[Path]:
    return sorted(RULES.rglob("*.py"))


def _forbidden_imports(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if any(name == m or name.startswith(m + ".") for m in FORBIDDEN_MODULES):
                found.append(name)
    return found


def _wall_clock_calls(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            owner_name = (
                owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            )
            if (owner_name, node.func.attr) in FORBIDDEN_CALLS:
                found.append(f"{owner_name}.{node.func.attr}() line {node.lineno}")
    return found


def test_rule_modules_exist() -> None:
    names = {p.name for p in _rule_modules()}
    assert {"evaluation.py", "definition.py", "authz.py", "lifecycle.py"} <= names


@pytest.mark.parametrize("module", _rule_modules(), ids=lambda p: str(p.relative_to(RULES)))
def test_rule_module_imports_no_kafka_redis_or_clock(module: Path) -> None:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    assert _forbidden_imports(tree) == []


@pytest.mark.parametrize("module", _rule_modules(), ids=lambda p: str(p.relative_to(RULES)))
def test_rule_module_never_reads_the_wall_clock(module: Path) -> None:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    assert _wall_clock_calls(tree) == []


def test_checker_catches_a_forbidden_import_and_call() -> None:
    tree = ast.parse(
        "import redis\nfrom confluent_kafka import Producer\n"
        "from pipeline.clock import SystemClock\n"
        "import datetime\nx = datetime.datetime.now()\nimport time\ny = time.time()\n"
    )
    assert _forbidden_imports(tree) == [
        "redis",
        "confluent_kafka",
        "confluent_kafka.Producer",
        "pipeline.clock",
        "pipeline.clock.SystemClock",
    ]
    assert len(_wall_clock_calls(tree)) == 2
