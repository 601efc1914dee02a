"""``vigil watch validate``, ``watch create``'s local check and ``vigil publish --dry-run``:
offline, every problem at once as ``FILE:line:col: field: message (hint)``, exit 1, and no
broker reached (the configured one does not exist)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli.group import vigil
from tests.unit.ops.test_validate import FOUR_WRONG

pytestmark = pytest.mark.unit

NO_BROKER = '[kafka]\nbootstrap_servers = "127.0.0.1:1"\n'


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "vigil.toml"
    path.write_text(NO_BROKER, encoding="utf-8")
    return path


def test_validate_prints_four_lines_for_four_errors_and_exits_1(
    tmp_path: Path, config: Path
) -> None:
    wrong = tmp_path / "wrong.json"
    wrong.write_text(FOUR_WRONG, encoding="utf-8")
    result = CliRunner().invoke(
        vigil, ["--config", str(config), "watch", "validate", "-f", str(wrong)]
    )
    lines = result.stdout.splitlines()
    assert result.exit_code == 1
    assert len(lines) == 4
    assert all(line.startswith(f"{wrong}:") for line in lines)
    assert [line.split(":")[3].strip() for line in lines] == [
        "mode",
        "source.max_age",
        "condition.all[0]",
        "privacyy",
    ]


def test_validate_accepts_good_files_and_reports_each(config: Path) -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "release-build-failed.json"
    result = CliRunner().invoke(vigil, ["--config", str(config), "watch", "validate", str(example)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{example}: ok"


def test_validate_reports_a_message_naming_a_leaf_the_allowlist_does_not_keep(
    tmp_path: Path, config: Path
) -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "release-build-failed.json"
    wrong = tmp_path / "author.json"
    wrong.write_text(example.read_text().replace("payload.branch", "payload.author"))
    result = CliRunner().invoke(vigil, ["--config", str(config), "watch", "validate", str(wrong)])
    assert result.exit_code == 1
    assert f"{wrong}:10:27: delivery.message: {{payload.author}} is not a leaf" in result.output


def test_create_checks_locally_and_sends_nothing_when_wrong(tmp_path: Path, config: Path) -> None:
    wrong = tmp_path / "wrong.json"
    wrong.write_text(FOUR_WRONG, encoding="utf-8")
    args = ["--config", str(config), "watch", "create", "-f", str(wrong)]
    result = CliRunner().invoke(vigil, args)
    assert result.exit_code == 1
    assert len([line for line in result.stderr.splitlines() if line.startswith(str(wrong))]) == 4


def test_truncated_json_is_reported_with_its_file_name(tmp_path: Path, config: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_text(FOUR_WRONG[:100], encoding="utf-8")
    result = CliRunner().invoke(
        vigil, ["--config", str(config), "watch", "validate", "-f", str(cut)]
    )
    assert result.exit_code == 1
    assert result.stdout.startswith(f"{cut}:") and "not JSON" in result.stdout


def test_publish_dry_run_checks_every_line_and_warns_without_a_broker(config: Path) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    good = '{"source_id": "s", "event_type": "t", "event_id": "%s", "observed_at": "%s"}'
    lines = "\n".join(
        [
            good % ("e-1", now),
            good % ("e-2", "2099-01-01T00:00:00Z"),
            '{"source_id": "s", "event_type": "t", "observed_at": "x"}',
            good % ("e-4", "2001-01-01T00:00:00Z"),
        ]
    )
    args = ["--config", str(config), "publish", "--dry-run", "-"]
    result = CliRunner().invoke(vigil, args, input=lines + "\n")
    assert result.exit_code == 1
    err = result.stderr.splitlines()
    assert [line.split(":")[1] for line in err if "warning" in line] == ["2", "4"]
    assert any(line.startswith("<stdin>:3:") and "event_id" in line for line in err)
    assert err[-1] == "checked 4: 3 valid, rejected 1"
