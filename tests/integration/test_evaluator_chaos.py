"""Exactly-once decisions under kill -9: ``vigil evaluator`` processes killed during a
20,000-event run, then restarted; the committed outbox holds exactly the expected keys, each once.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.kafka.topics import Topology
from pipeline.rules.keys import EventTrigger, delivery_key
from tests.integration.evaluator_helpers import (
    Writer,
    event_definition,
    make_topology,
    outbox_entries,
)

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(420)]

PARTITIONS = 4
TOTAL = 20_000
SOURCES = 40
TYPE = "build.finished"
KILL_PHASE_S = 35.0
FINISH_S = 150.0
ROOT = Path(__file__).resolve().parents[2]


class Member:
    """One ``vigil evaluator`` process that the test kills and restarts."""

    def __init__(self, config: Path, instance: str, log_dir: Path) -> None:
        self.args = [sys.executable, "-m", "pipeline.cli.main", "--config", str(config)]
        self.args += ["evaluator", "--instance", instance, "--static-membership", "--no-metrics"]
        self.log = (log_dir / f"evaluator-{instance}.log").open("ab")
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=self.log, stderr=self.log)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.kills += 1

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
        finally:
            self.log.close()


def write_config(path: Path, bootstrap: str, redis_url: str, topology: Topology) -> Path:
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{bootstrap}"\ntopic_prefix = "{topology.prefix}"\n'
        f'partitions = {PARTITIONS}\n\n[redis]\nurl = "{redis_url}"\n',
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("members", [1, 2], ids=["one-member", "two-members"])
def test_killed_evaluators_leave_exactly_the_expected_outbox_keys(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, members: int
) -> None:
    topology = make_topology(kafka_bootstrap, PARTITIONS, "chaos")
    writer = Writer(kafka_bootstrap, topology)
    tenant = f"t{uuid.uuid4().hex[:8]}"
    sources = [f"src.{n}" for n in range(SOURCES)]
    writer.grant(tenant, "u-1", sources, "g-1")
    for n, source in enumerate(sources):
        writer.watcher(event_definition(tenant, "u-1", f"w-{n}", source, TYPE, max_age="1h"))
    expected = {
        delivery_key(
            tenant_id=tenant,
            user_id="u-1",
            watcher_id=f"w-{i % SOURCES}",
            watcher_version=1,
            source_id=sources[i % SOURCES],
            trigger=EventTrigger(TYPE, f"e-{i}"),
        )
        for i in range(TOTAL)
        if i % 3 == 0
    }

    config = write_config(tmp_path / "vigil.toml", kafka_bootstrap, redis_url, topology)
    group = [Member(config, f"m{n}", tmp_path) for n in range(members)]
    for member in group:
        member.start()
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "11")))

    def feed() -> None:  # 40 slices over the kill phase; every 10th event arrives twice
        for start in range(0, TOTAL, TOTAL // 40):
            for i in range(start, start + TOTAL // 40):
                status = "failed" if i % 3 == 0 else "passed"
                observed = datetime.now(UTC)
                source = sources[i % SOURCES]
                writer.event(source, TYPE, f"e-{i}", {"status": status}, observed, flush=False)
                if i % 10 == 0:
                    writer.event(
                        source, TYPE, f"e-{i}", {"status": status}, observed,
                        envelope_id=f"again-{i}", cursor=str(i), flush=False,
                    )  # fmt: skip
            writer.flush()
            time.sleep(KILL_PHASE_S * 0.8 / 40)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    codes: list[int | None] = []
    try:
        end_of_kills = time.monotonic() + KILL_PHASE_S
        while time.monotonic() < end_of_kills:
            time.sleep(rng.uniform(2.0, 4.0))
            member = rng.choice(group)
            member.kill()
            time.sleep(rng.choice([0.2, 1.0, 3.0]))
            member.start()
        feeder.join(120)
        assert not feeder.is_alive()
        deadline = time.monotonic() + FINISH_S
        keys = {e.delivery_key for e in outbox_entries(kafka_bootstrap, topology)}
        while keys != expected and time.monotonic() < deadline:
            time.sleep(2.0)
            keys = {e.delivery_key for e in outbox_entries(kafka_bootstrap, topology)}
    finally:
        codes = [member.stop() for member in group]

    assert sum(m.kills for m in group) >= 8, "the chaos did not happen"
    assert codes == [0] * members, f"evaluators did not stop cleanly: {codes}"
    log = Counter(e.delivery_key for e in outbox_entries(kafka_bootstrap, topology))
    missing, extra = len(expected - set(log)), len(set(log) - expected)
    repeated = sum(1 for n in log.values() if n > 1)
    assert (missing, extra, repeated) == (0, 0, 0), (
        f"{missing} keys missing, {extra} unexpected, {repeated} written twice"
    )
