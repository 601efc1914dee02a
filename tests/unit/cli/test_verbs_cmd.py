"""The verbs' command line: help that teaches, argv → the request the daemon receives, exit
codes. The daemon side is a real socket server whose handler records what it was sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pipeline.cli.group import vigil
from pipeline.control.socket.server import Peer, SocketServer
from pipeline.control.verbs import VerbErrorKind, VerbResponse

pytestmark = pytest.mark.unit

VERBS = ("send", "prompt", "query", "run", "schedule", "list", "cancel", "daemon")


class Recorder:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.reply = VerbResponse.success(
            chat="me", name="n", argv=["send", "hi"], next_fire="2026-12-01T07:00:00Z"
        )

    def __call__(self, body: object, peer: Peer) -> VerbResponse:
        assert isinstance(body, dict)
        self.bodies.append(body)
        return self.reply


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Path, Recorder]]:
    recorder = Recorder()
    with SocketServer(tmp_path / "v.sock", recorder) as server:
        yield server.path, recorder


def _invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    base = {"VIGIL_CHAT_ID": "", "VIGIL_AGENT_TOKEN": "", "VIGIL_CONFIG": ""}
    return CliRunner().invoke(vigil, args, env={**base, **(env or {})}, catch_exceptions=False)


def test_top_level_help_teaches_every_verb_with_an_example() -> None:
    result = _invoke(["--help"])
    assert result.exit_code == 0
    for verb in ("send", "prompt", "query", "run", "schedule", "list", "cancel"):
        line = next(line for line in result.output.splitlines() if line.strip().startswith(verb))
        assert f"vigil {verb}" in line or verb == "schedule", line
    assert "vigil schedule --in 1h" in result.output


@pytest.mark.parametrize("verb", VERBS)
def test_each_verbs_help_has_an_example(verb: str) -> None:
    result = _invoke([verb, "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output
    assert f"vigil {verb}" in result.output


def test_schedule_argv_after_double_dash_reaches_the_daemon_whole(
    daemon: tuple[Path, Recorder],
) -> None:
    path, recorder = daemon
    result = _invoke(
        ["schedule", "--socket", str(path), "--in", "2s", "--name", "n", "--", "send", "hi", "--x"]
    )
    assert result.exit_code == 0, result.output
    assert recorder.bodies == [
        {
            "verb": "schedule",
            "in": "2s",
            "name": "n",
            "update": False,
            "argv": ["send", "hi", "--x"],
        }
    ]
    assert "n" in result.output and "2026-12-01T07:00:00Z" in result.output


def test_schedule_with_two_timing_flags_is_a_usage_error_and_sends_nothing(
    daemon: tuple[Path, Recorder],
) -> None:
    path, recorder = daemon
    result = _invoke(
        ["schedule", "--socket", str(path), "--in", "2s", "--cron", "* * * * *", "--", "send", "x"]
    )
    assert result.exit_code == 2
    assert "exactly one of --in, --at, --cron" in result.output
    assert recorder.bodies == []


def test_schedule_of_query_is_a_usage_error(daemon: tuple[Path, Recorder]) -> None:
    path, recorder = daemon
    result = _invoke(["schedule", "--socket", str(path), "--in", "2s", "--", "query", "x"])
    assert result.exit_code == 2
    assert "only send, prompt or run" in result.output
    assert recorder.bodies == []


def test_chat_comes_from_the_flag_then_vigil_chat_id_and_the_token_rides_along(
    daemon: tuple[Path, Recorder],
) -> None:
    path, recorder = daemon
    env = {"VIGIL_SOCKET": str(path), "VIGIL_CHAT_ID": "ops", "VIGIL_AGENT_TOKEN": "tok"}
    assert _invoke(["send", "hello", "world"], env).exit_code == 0
    assert _invoke(["send", "--chat", "me", "x"], env).exit_code == 0
    assert recorder.bodies[0] == {
        "verb": "send",
        "text": "hello world",
        "chat": "ops",
        "token": "tok",
    }
    assert recorder.bodies[1]["chat"] == "me"


def test_run_with_a_path_sends_it_absolute_and_a_bare_name_as_is(
    daemon: tuple[Path, Recorder], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, recorder = daemon
    recorder.reply = VerbResponse.success(chat="me", script="/x", pid=1)
    monkeypatch.chdir(tmp_path)
    assert _invoke(["run", "--socket", str(path), "./job.sh", "--flag"]).exit_code == 0
    assert _invoke(["run", "--socket", str(path), "job.sh"]).exit_code == 0
    assert recorder.bodies[0]["args"] == [str(tmp_path / "job.sh"), "--flag"]
    assert recorder.bodies[1]["args"] == ["job.sh"]


def test_a_refusal_prints_the_message_and_exits_1(daemon: tuple[Path, Recorder]) -> None:
    path, recorder = daemon
    recorder.reply = VerbResponse.failure(VerbErrorKind.NOT_FOUND, "no schedule named 'x'", "name")
    result = _invoke(["cancel", "--socket", str(path), "--name", "x"])
    assert result.exit_code == 1
    assert "no schedule named 'x'" in result.output


def test_list_json_prints_the_entries(daemon: tuple[Path, Recorder]) -> None:
    path, recorder = daemon
    entry = {
        "name": "n",
        "chat": "me",
        "schedule": {"at": "t"},
        "argv": ["send", "x"],
        "created_at": "c",
        "next_fire": "t",
    }
    recorder.reply = VerbResponse.success(chat="me", schedules=[entry])
    result = _invoke(["list", "--socket", str(path), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output) == [entry]


def test_list_prints_a_table_with_one_row_per_live_schedule(daemon: tuple[Path, Recorder]) -> None:
    path, recorder = daemon
    entries: list[dict[str, Any]] = [
        {
            "name": "stretch",
            "chat": "me",
            "schedule": {"at": "2026-12-01T07:00:00Z"},
            "argv": ["send", "stand up and stretch"],
            "created_at": "2026-11-30T07:00:00Z",
            "next_fire": "2026-12-01T07:00:00Z",
        },
        {
            "name": "digest",
            "chat": "me",
            "schedule": {"cron": "0 8 * * *", "timezone": "Europe/Berlin"},
            "argv": ["prompt", "morning digest"],
            "created_at": "2026-11-30T07:00:00Z",
            "next_fire": "2026-12-02T07:00:00Z",
        },
    ]
    recorder.reply = VerbResponse.success(chat="me", schedules=entries)
    result = _invoke(["list", "--socket", str(path)])
    assert result.exit_code == 0
    header, *rows = result.output.splitlines()
    assert header.split() == ["NAME", "NEXT", "FIRE", "WHEN", "COMMAND"]
    columns = [header.index(title) for title in ("NEXT FIRE", "WHEN", "COMMAND")]
    assert len(rows) == 2
    for row, entry, when in zip(
        rows, entries, ["2026-12-01T07:00:00Z", "0 8 * * * (Europe/Berlin)"], strict=True
    ):
        assert row[: columns[0]].strip() == entry["name"]
        assert row[columns[0] : columns[1]].strip() == entry["next_fire"]
        assert row[columns[1] : columns[2]].strip() == when
        assert row[columns[2] :] == f'{entry["argv"][0]} "{entry["argv"][1]}"'
    recorder.reply = VerbResponse.success(chat="me", schedules=[])
    assert _invoke(["list", "--socket", str(path)]).output == "no schedules in chat me\n"
