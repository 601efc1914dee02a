"""Scenario 6 in CI: the soak benchmark (``benchmarks/soak.py``) for three minutes against this
test's own broker and Redis — events, polls, schedules, deliveries with 10% receiver failures —
must lose nothing, repeat nothing and leave no process behind. The 20-minute run and its memory
goal (RSS growth after the warm-up < 10%) are run by hand: ``python -m benchmarks.soak``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.soak import SoakSettings, run
from tests.chaos.scenario import size
from tests.chaos.servers import OwnKafka, OwnRedis

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

MINUTES = size(ci=3, full=20)


def test_three_minute_soak_loses_nothing_and_repeats_nothing(
    kafka: OwnKafka, redis_server: OwnRedis, tmp_path: Path
) -> None:
    settings = SoakSettings(minutes=MINUTES, warmup_minutes=1, events_per_s=15, pollers=20)
    report = run(settings, bootstrap=kafka.bootstrap, redis_url=redis_server.url, root=tmp_path)
    summary = json.dumps({k: v for k, v in report.items() if k != "samples"}, default=str)
    assert report["lost"] == 0, summary
    assert report["duplicates"] == 0, summary
    assert report["checker"]["ok"], summary
    assert report["settled"], summary
    assert not report["exited_on_their_own"], summary
    assert set(report["exit_codes"].values()) == {0}, summary
    checked = report["checker"]
    assert checked["expected"] >= report["events_published"] // 3 > 0, summary
    assert checked["ticks"] > 0, summary
    assert checked["received"] == checked["expected"], summary
