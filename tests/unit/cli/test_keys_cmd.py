"""The key-encryption key at the process edge: ``vigil keys``, the refusal to start without a
KEK (one line, with the fix, before any broker is reached) and ``vigil dev``'s generated key."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli.group import vigil
from pipeline.config import load_config
from pipeline.crypto import KeyEncryptionKeys
from pipeline.ops.dev_stack import DevPorts, dev_master_keys, write_config

pytestmark = pytest.mark.unit

UNREACHABLE = '[kafka]\nbootstrap_servers = "127.0.0.1:1"\n'


@pytest.mark.parametrize(
    "process", ["command-processor", "evaluator", "ticker", "delivery", "daemon", "api"]
)
def test_a_process_without_a_kek_refuses_in_one_line_before_reaching_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, process: str
) -> None:
    monkeypatch.delenv("VIGIL_MASTER_KEYS", raising=False)
    config = tmp_path / "vigil.toml"
    config.write_text(UNREACHABLE, encoding="utf-8")
    result = CliRunner().invoke(vigil, ["--config", str(config), process])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith("Error: no key-encryption key")
    assert "vigil keys generate" in errors[0]
    assert "Traceback" not in result.stderr


def test_keys_generate_prints_an_entry_the_config_reads_and_check_names_only_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = CliRunner().invoke(vigil, ["keys", "generate", "--id", "ops-1"])
    assert made.exit_code == 0
    entry = made.stdout.strip()
    assert entry.startswith("ops-1:")
    monkeypatch.setenv("VIGIL_MASTER_KEYS", entry)
    config = tmp_path / "vigil.toml"
    config.write_text(UNREACHABLE, encoding="utf-8")
    checked = CliRunner().invoke(vigil, ["--config", str(config), "keys", "check"])
    assert checked.exit_code == 0
    assert checked.stdout.strip() == "key-encryption keys: ops-1 (new wraps use ops-1)"
    assert entry.split(":", 1)[1] not in checked.stdout


def test_vigil_dev_generates_its_kek_once_private_and_points_its_config_at_it(
    tmp_path: Path,
) -> None:
    state = tmp_path / "dev"
    path = dev_master_keys(state)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text()
    assert dev_master_keys(state).read_text() == first, "made once, kept"
    main = write_config(state, DevPorts(19092, 19093, 16379, 18088, {}), "token", 2)
    config = load_config(main, environ={})
    assert config.privacy.master_key_file == path
    assert config.privacy.keks(environ={}).ids == KeyEncryptionKeys.parse(first).ids
