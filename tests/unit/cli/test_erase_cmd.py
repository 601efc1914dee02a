"""``vigil erase``: what it prints for an erasure, and that declining sends nothing (the answer
is read before any broker is reached, so an unreachable one proves it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli.erase_cmd import erasure_reach, render_erased
from pipeline.cli.group import vigil

pytestmark = pytest.mark.unit


def test_render_lists_what_was_shredded_then_each_erased_watcher() -> None:
    result = {
        "tenant_id": "acme",
        "user_id": "u-42",
        "erased": 2,
        "watcher_ids": ["a", "b"],
        "keys_shredded": 3,
        "grants_revoked": 1,
    }
    lines = render_erased(result).splitlines()
    assert lines[:3] == [
        "erased acme/u-42: 2 watchers, 3 data keys shredded, 1 grant revoked",
        "  a",
        "  b",
    ]
    none = {"tenant_id": "acme", "user_id": "u-42", "erased": 0, "watcher_ids": []}
    assert render_erased(none).splitlines()[0] == (
        "erased acme/u-42: 0 watchers, 0 data keys shredded, 0 grants revoked"
    )


def test_render_says_what_erasure_cannot_reach_and_how_long_ciphertext_remains() -> None:
    text = render_erased({"tenant_id": "acme", "user_id": "u-42", "erased": 0})
    reach = erasure_reach()
    assert "not reached (copies outside Kafka):" in text
    assert "webhook receivers" in text and "the events topic" in text
    # The longest-lived sealed topic is definition-log: 90 days plus a day's segment.
    assert reach["ciphertext_remains"] == "91d"
    assert reach["ciphertext_remains_in"] == "definition-log"
    assert "ciphertext remains at most 91d (definition-log retention)" in text
    assert reach["wrapped_keys_remain"] == "2h"


@pytest.mark.parametrize("answer", ["n\n", ""], ids=["no", "no-terminal"])
def test_declining_or_no_answer_aborts_before_any_command(tmp_path: Path, answer: str) -> None:
    config = tmp_path / "vigil.toml"
    config.write_text('[kafka]\nbootstrap_servers = "127.0.0.1:1"\n', encoding="utf-8")
    args = ["--config", str(config), "erase", "--tenant", "acme", "--user", "u-42"]
    result = CliRunner().invoke(vigil, [*args, "--timeout", "0.5"], input=answer)
    assert result.exit_code == 1
    assert "Erase every watcher of tenant 'acme' user 'u-42'?" in result.stderr
    assert "Aborted" in result.stderr
    assert "no answer" not in result.output + result.stderr


def test_tenant_and_user_are_both_required() -> None:
    result = CliRunner().invoke(vigil, ["erase", "--tenant", "acme", "--yes"])
    assert result.exit_code == 2
    assert "--user" in result.stderr
