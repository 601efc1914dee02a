"""The tree is the data flow: import-linter's contracts in pyproject.toml hold, and they catch a
wrong import (made in a temporary copy of the packages, never in the tree itself)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pipeline", "consumers", "producers", "schemas")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _copy(tmp_path: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _add_import(root: Path, module: str, line: str) -> None:
    path = root / Path(*module.split(".")).with_suffix(".py")
    text = path.read_text(encoding="utf-8")
    head, sep, rest = text.partition("from __future__ import annotations\n")
    path.write_text(f"{head}{sep}\n{line}\n{rest}", encoding="utf-8")


def test_every_layer_contract_is_kept() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 8 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("pipeline.rules.keys", "import pipeline.kafka.serde", "The rules import nothing"),
        ("pipeline.records.receipt", "import pipeline.runtime.views", "Records import only"),
        ("consumers.evaluator.plan", "import consumers.delivery.due", "never import each other"),
        ("pipeline.control.core", "import pipeline.cli.process", "Nothing imports the CLI"),
        ("pipeline.runtime.batch", "import consumers.evaluator.plan", "runtime imports no stage"),
        ("producers.ticker.agenda", "import confluent_kafka", "import confluent_kafka"),
        ("consumers.delivery.sweep", "import redis", "imports redis"),
    ],
)
def test_a_wrong_import_in_a_copy_is_reported_by_its_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    root = _copy(tmp_path)
    _add_import(root, module, line)
    result = _lint(root)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout
    assert module in broken
