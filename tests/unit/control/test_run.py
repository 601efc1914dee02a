"""``run``: only allowlisted scripts start, with vigil's context in their environment."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.control.run import ScriptRunner, resolve_script
from pipeline.rules.errors import DefinitionError

pytestmark = pytest.mark.unit


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o700)
    return path


@pytest.fixture
def allow(tmp_path: Path) -> Path:
    directory = tmp_path / "scripts"
    directory.mkdir()
    return directory


def test_resolve_script_finds_a_bare_name_in_the_allowlist(allow: Path) -> None:
    script = _script(allow / "ok.sh", "true\n")
    assert resolve_script("ok.sh", allow) == script.resolve()


def test_resolve_script_refuses_a_symlink_that_points_outside(allow: Path, tmp_path: Path) -> None:
    outside = _script(tmp_path / "evil.sh", "true\n")
    (allow / "link.sh").symlink_to(outside)
    with pytest.raises(DefinitionError, match="outside the run allowlist"):
        resolve_script("link.sh", allow)


@pytest.mark.parametrize("name", ["../evil.sh", "/bin/sh", "missing.sh"])
def test_resolve_script_refuses_escapes_and_absent_files(
    allow: Path, tmp_path: Path, name: str
) -> None:
    _script(tmp_path / "evil.sh", "true\n")
    with pytest.raises(DefinitionError):
        resolve_script(name, allow)


def test_resolve_script_refuses_a_file_that_is_not_executable(allow: Path) -> None:
    (allow / "plain.sh").write_text("true\n")
    with pytest.raises(DefinitionError, match="not an executable"):
        resolve_script("plain.sh", allow)


def test_scheduled_run_gets_chat_socket_key_name_and_time(allow: Path, tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    _script(
        allow / "env.sh",
        'echo "$VIGIL_CHAT_ID|$VIGIL_SOCKET|$VIGIL_DELIVERY_KEY|'
        '$VIGIL_SCHEDULE_NAME|$VIGIL_SCHEDULE_TIME|$1" > "$2"\n',
    )
    runner = ScriptRunner(allow, tmp_path / "v.sock", environ=dict(os.environ))
    runner.start(
        ["env.sh", "arg one", str(out)],
        chat="me",
        delivery_key="k" * 64,
        schedule_name="digest",
        schedule_time=datetime(2026, 12, 1, 7, 0, tzinfo=UTC),
    )
    runner.wait_all(10)
    assert out.read_text().strip().split("|") == [
        "me",
        str(tmp_path / "v.sock"),
        "k" * 64,
        "digest",
        "2026-12-01T07:00:00Z",
        "arg one",
    ]


def test_immediate_run_has_no_schedule_variables_even_if_the_daemon_had_them(
    allow: Path, tmp_path: Path
) -> None:
    out = tmp_path / "env.txt"
    _script(allow / "env.sh", 'echo "[$VIGIL_SCHEDULE_NAME]" > "$1"\n')
    environ = {**os.environ, "VIGIL_SCHEDULE_NAME": "leaked"}
    runner = ScriptRunner(allow, tmp_path / "v.sock", environ=environ)
    runner.start(["env.sh", str(out)], chat="me", delivery_key="k" * 64)
    runner.wait_all(10)
    assert out.read_text().strip() == "[]"


def test_run_logs_stdout_at_debug_exit_at_info_and_failure_at_warning(
    allow: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _script(allow / "fail.sh", "echo progress\nexit 4\n")
    runner = ScriptRunner(allow, tmp_path / "v.sock")
    with caplog.at_level(logging.DEBUG, logger="pipeline.control.run"):
        runner.start(["fail.sh"], chat="me", delivery_key="k" * 64)
        runner.wait_all(10)
    levels = {(r.levelno, r.getMessage().split(": ")[-1]) for r in caplog.records}
    assert (logging.DEBUG, "progress") in levels
    assert any(r.levelno == logging.INFO and "exited 4" in r.getMessage() for r in caplog.records)
    assert any(r.levelno == logging.WARNING and "failed" in r.getMessage() for r in caplog.records)
