"""``vigil daemon``'s host edge: which local zone schedules are read in, and no agent under the
daemon's own uid unless the configuration says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli.daemon_cmd import SAME_UID, host_zone
from pipeline.cli.group import vigil
from pipeline.rules.errors import DefinitionError

pytestmark = pytest.mark.unit


def test_configured_zone_wins_over_the_hosts() -> None:
    assert host_zone("Asia/Tokyo", {"TZ": "Europe/Berlin"}).key == "Asia/Tokyo"


def test_tz_variable_is_used_when_nothing_is_configured() -> None:
    assert host_zone(None, {"TZ": ":America/New_York"}).key == "America/New_York"


def test_an_invalid_configured_zone_is_an_error_not_a_guess() -> None:
    with pytest.raises(DefinitionError):
        host_zone("Mars/Olympus", {})


@pytest.mark.parametrize("opt_in", [False, True])
def test_a_same_uid_agent_is_refused_unless_the_configuration_says_so(
    tmp_path: Path, opt_in: bool
) -> None:
    """DESIGN.md §10: a same-uid agent runs only under vigil dev or an explicit opt-in; the
    refusal is one line naming the setting and the risk, before any broker round trip."""
    config = tmp_path / "vigil.toml"
    config.write_text(
        '[kafka]\nbootstrap_servers = "127.0.0.1:1"\n\n'
        '[agent]\ncommand = ["/bin/cat"]\n' + ("allow_same_uid = true\n" if opt_in else "")
    )
    result = CliRunner().invoke(
        vigil, ["--config", str(config), "daemon", "--socket", str(tmp_path / "s.sock")]
    )
    if opt_in:
        assert SAME_UID not in result.output  # it goes on (and fails later: no broker here)
    else:
        assert result.exit_code == 1
        assert result.output.strip().splitlines() == [f"Error: {SAME_UID}"]
        assert "run_as" in SAME_UID and "allow_same_uid" in SAME_UID
