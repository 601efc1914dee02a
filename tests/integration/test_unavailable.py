"""With no broker (or no Redis), commands answer at once: exit 69 and one line on stderr naming
the address, the configuration key and the fix — never librdkafka's log lines. The tests assert
the line count and content, not the time it took (the probe's deadline bounds it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "127.0.0.1:1"  # a privileged port nothing listens on: connections are refused


def _vigil(config: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli.main", "--config", str(config), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=False,
    )


def _event() -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    line = {"source_id": "s", "event_type": "t", "event_id": "e-1", "observed_at": now}
    return json.dumps(line) + "\n"


@pytest.fixture
def no_broker(tmp_path: Path) -> Path:
    config = tmp_path / "vigil.toml"
    config.write_text(f'[kafka]\nbootstrap_servers = "{NOWHERE}"\n', encoding="utf-8")
    return config


@pytest.mark.parametrize(
    "args", [("watch", "list"), ("publish", "-"), ("evaluator", "--no-metrics")], ids=str
)
def test_without_a_broker_a_command_exits_69_with_one_line(
    no_broker: Path, args: tuple[str, ...]
) -> None:
    done = _vigil(no_broker, *args, stdin=_event())
    assert done.returncode == 69, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("Error: the Kafka broker at 127.0.0.1:1 does not answer")
    assert "[kafka] bootstrap_servers" in line and "vigil dev" in line
    assert done.stdout == ""


def test_without_a_broker_json_error_is_one_json_object(no_broker: Path) -> None:
    done = _vigil(no_broker, "watch", "list", "--json")
    assert done.returncode == 69
    (line,) = done.stderr.splitlines()
    error = json.loads(line)["error"]
    assert error["code"] == "unavailable" and NOWHERE in error["message"]


def test_without_redis_a_worker_exits_69_naming_redis_without_its_password(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    config = tmp_path / "vigil.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\n\n'
        '[redis]\nurl = "redis://:hunter2@127.0.0.1:1/0"\n',
        encoding="utf-8",
    )
    done = _vigil(config, "evaluator", "--no-metrics")
    assert done.returncode == 69, done.stderr
    (line,) = done.stderr.splitlines()
    assert "Redis at redis://127.0.0.1:1/0 does not answer" in line
    assert "[redis] url" in line and "hunter2" not in line
