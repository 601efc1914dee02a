"""``vigil dev --broker``: the choice, its ``VIGIL_BROKER`` variable (what ``make run``
passes on) and the default (Kafka with Java, else Tansu) — decided before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli.main import vigil
from pipeline.ops.dev_stack import default_broker

pytestmark = pytest.mark.unit


def test_vigil_broker_variable_reaches_the_option_and_is_checked() -> None:
    result = CliRunner().invoke(vigil, ["dev"], env={"VIGIL_BROKER": "redpanda"})
    assert result.exit_code == 2
    assert "--broker" in result.output and "'kafka', 'tansu'" in result.output


def test_default_broker_is_tansu_without_java_and_kafka_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert default_broker() == "tansu"
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\n", encoding="utf-8")
    java.chmod(0o755)
    assert default_broker() == "kafka"


def test_makefile_run_is_vigil_dev_so_it_honours_vigil_broker() -> None:
    makefile = (Path(__file__).resolve().parents[3] / "Makefile").read_text(encoding="utf-8")
    assert "@exec $(VENV)/bin/vigil dev\n" in makefile
