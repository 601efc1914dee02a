"""``vigil completion``: a script per shell, and completers that complete nothing (never fail)
when no vigil is running."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pipeline.cli.completion_cmd import complete_schedule_names
from pipeline.cli.group import vigil
from pipeline.cli.round_trip import complete_watcher_ids

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_that_calls_back_into_vigil(shell: str) -> None:
    result = CliRunner().invoke(vigil, ["completion", shell])
    assert result.exit_code == 0
    assert "_VIGIL_COMPLETE" in result.stdout and "vigil" in result.stdout


def test_completion_of_an_unknown_shell_is_a_usage_error() -> None:
    assert CliRunner().invoke(vigil, ["completion", "tcsh"]).exit_code == 2


def test_completers_complete_nothing_when_vigil_is_not_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "vigil.toml"
    config.write_text(
        '[kafka]\nbootstrap_servers = "127.0.0.1:1"\n'
        f'[rpc]\nsocket_path = "{tmp_path / "none.sock"}"\n',
        encoding="utf-8",
    )
    monkeypatch.delenv("VIGIL_SOCKET", raising=False)
    ctx = click.Context(vigil)
    ctx.params["config_path"] = config
    param = click.Argument(["watcher_id"])
    assert complete_schedule_names(ctx, param, "") == []
    assert complete_watcher_ids(ctx, param, "") == []
