"""``vigil daemon``'s host edge: which local zone schedules are read in."""

from __future__ import annotations

import pytest

from pipeline.cli.daemon_cmd import host_zone
from pipeline.rules.errors import DefinitionError

pytestmark = pytest.mark.unit


def test_configured_zone_wins_over_the_hosts() -> None:
    assert host_zone("Asia/Tokyo", {"TZ": "Europe/Berlin"}).key == "Asia/Tokyo"


def test_tz_variable_is_used_when_nothing_is_configured() -> None:
    assert host_zone(None, {"TZ": ":America/New_York"}).key == "America/New_York"


def test_an_invalid_configured_zone_is_an_error_not_a_guess() -> None:
    with pytest.raises(DefinitionError):
        host_zone("Mars/Olympus", {})
