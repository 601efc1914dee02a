"""The delivery consumer killed with SIGKILL mid-run: at least once, and nothing invented.

A ``vigil delivery`` process delivers 5,000 outbox entries to a real local receiver; it is
killed with SIGKILL twice while sends are in flight and restarted with the same instance id (so
its ``init_transactions`` fences what the dead one left open). Every outbox key must reach the
receiver at least once, the receiver's distinct keys must equal the outbox's, and the final
``delivery-state`` must say ``delivered`` for every key.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from consumers.delivery.adapters.signing import Verification
from pipeline.rules.outcomes import DeliveryStatus
from tests.integration.delivery_harness import SECRET, SECRET_ENV, Harness, poll_until
from tests.receiver import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

ENTRIES = 5_000
KILL_AT = (1_000, 2_500)  # requests seen by the receiver when each SIGKILL lands


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(secret=SECRET) as running:
        yield running


def _config(harness: Harness, path: Path) -> Path:
    path.write_text(
        f"""
[kafka]
bootstrap_servers = "{harness.bootstrap}"
topic_prefix = "{harness.topology.prefix}"
partitions = {harness.topology.partitions}

[redis]
url = "{harness.redis_url}"

[destinations.hook]
kind = "webhook"
url = "{harness.receiver.hook_url}"
secret_env = "{SECRET_ENV}"
timeout = "5s"

[budgets.defaults]
window = "1h"
deliveries = 1000000
attempts = 1000000
""",
        encoding="utf-8",
    )
    return path


class _Process:
    """``vigil delivery`` in a subprocess, logs to a file (read on failure)."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, SECRET_ENV: SECRET}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pipeline.cli.main",
                    "--config",
                    str(self.config),
                    "delivery",
                    "--instance",
                    "chaos-1",
                    "--group",
                    "chaos.delivery",
                    "--no-metrics",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(90)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def test_sigkill_during_5000_deliveries_loses_none_and_invents_none(
    kafka_bootstrap: str,
    redis_url: str,
    unique_name: Callable[[str], str],
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    harness = Harness.create(kafka_bootstrap, redis_url, unique_name("chaos"), receiver)
    tenant = harness.name  # fresh budget counters for this run
    harness.grant("g-chaos", tenant=tenant)
    entries = harness.publish(harness.entry(f"k-{i}", tenant=tenant) for i in range(ENTRIES))
    keys = {e.delivery_key for e in entries}
    assert len(keys) == ENTRIES
    process = _Process(_config(harness, tmp_path / "vigil.toml"), tmp_path / "delivery.log")
    try:
        process.start()
        for threshold in KILL_AT:

            def reached(count: int = threshold) -> bool:
                return len(receiver.requests) >= count or not process.alive()

            poll_until(f"{threshold} requests", reached, timeout=120)
            assert process.alive(), process.log.read_text()
            process.kill()
            process.start()
        poll_until(
            "every key at the receiver",
            lambda: receiver.distinct_keys() >= keys or not process.alive(),
            timeout=180,
        )
        assert process.alive(), process.log.read_text()
        assert process.terminate() == 0, process.log.read_text()
    finally:
        if process.alive():
            process.kill()

    # A send cut off by SIGKILL may reach the receiver with a partial body: it does not count.
    whole = [r for r in receiver.requests if len(r.body) == int(r.headers["content-length"])]
    received = {r.idempotency_key for r in whole}
    assert received == keys  # every key at least once, and no key the outbox does not hold
    assert len(whole) >= ENTRIES
    verdicts = Counter(r.signature for r in whole)
    assert verdicts == {Verification.VALID: len(whole)}, verdicts
    latest = poll_until(
        "every state delivered",
        lambda: (
            (found := harness.latest())
            and all(
                (r := found.get(k)) is not None and r.state.status is DeliveryStatus.DELIVERED
                for k in keys
            )
            and found
        ),
        timeout=60,
    )
    assert set(latest) == keys
