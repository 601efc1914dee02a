"""Exactly-once under kill -9: two toy counters killed every few seconds over 20,000 inputs."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from pipeline.kafka.clients import producer_config
from pipeline.kafka.partitioner import partition_for
from tests.integration.runtime_helpers import create_topics, read_all, read_table

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(400)]

PARTITIONS = 4
TOTAL = 20_000
KEYS = 200
KILL_PHASE_S = 60.0
MIN_KILLS = 15  # the phase runs on (up to twice as long) until this many kills happened
FINISH_S = 120.0
ROOT = Path(__file__).resolve().parents[2]


class Toy:
    """One toy counter process that the test kills and restarts."""

    def __init__(self, args: list[str], instance: str, log_dir: Path) -> None:
        self.args = [*args, "--instance", instance]
        self.instance = instance
        self.log = (log_dir / f"toy-{instance}.log").open("ab")
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0
        self.stops = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.toy_counter", *self.args],
            cwd=ROOT,
            stdout=self.log,
            stderr=self.log,
        )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.kills += 1

    def freeze(self, seconds: float) -> None:
        """SIGSTOP long enough to lose the group: a zombie that must be fenced on waking."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        self.proc.send_signal(signal.SIGCONT)
        self.stops += 1

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
        finally:
            self.log.close()


def test_two_processes_killed_every_few_seconds_count_each_input_exactly_once(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    a, b, out = unique_name("chaos-a"), unique_name("chaos-b"), unique_name("chaos-out")
    changelog, group = unique_name("chaos-counts"), unique_name("chaos-group")
    create_topics(kafka_bootstrap, PARTITIONS, a, b, out)
    create_topics(kafka_bootstrap, PARTITIONS, changelog, compact=True)
    sent = [(f"k{i % KEYS}", b"id-%06d" % i) for i in range(TOTAL)]
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "7")))

    args = ["--bootstrap", kafka_bootstrap, "--inputs", f"{a},{b}", "--output", out]
    # Transactions held open ~0.5 s, so a random kill almost always lands inside one (checked
    # at the end: aborted outputs exist).
    args += ["--changelog", changelog, "--group", group, "--static", "--commit-interval-ms", "500"]
    toys = [Toy(args, "one", tmp_path), Toy(args, "two", tmp_path)]
    for toy in toys:
        toy.start()

    def feed() -> None:
        """A steady trickle over the kill phase, so a transaction is nearly always open."""
        producer = Producer(producer_config(kafka_bootstrap))
        slices = 400
        for n in range(slices):
            for key, value in sent[n * TOTAL // slices : (n + 1) * TOTAL // slices]:
                topic = a if n % 2 else b
                producer.produce(topic, value, key, partition_for(key, PARTITIONS))
            producer.flush(30)
            time.sleep(KILL_PHASE_S * 0.8 / slices)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        end_of_kills = time.monotonic() + KILL_PHASE_S
        give_up = end_of_kills + KILL_PHASE_S  # a loaded machine restarts toys slowly

        def killing() -> bool:
            now = time.monotonic()
            few = sum(t.kills for t in toys) < MIN_KILLS
            return now < end_of_kills or (few and now < give_up)

        while killing():
            time.sleep(rng.uniform(0.5, 2.0))
            toy = rng.choice(toys)
            if rng.random() < 0.08:
                toy.freeze(rng.uniform(7.0, 9.0))  # past session.timeout.ms: becomes a zombie
                continue
            toy.kill()
            time.sleep(rng.choice([0.1, 0.1, 0.3, 0.3, 1.0, 8.0]))  # 8 s: its partitions move
            toy.start()
        feeder.join(60)
        assert not feeder.is_alive()

        deadline = time.monotonic() + FINISH_S
        outputs = read_all(kafka_bootstrap, out, max_s=30)
        while len(outputs) < TOTAL and time.monotonic() < deadline:
            time.sleep(2.0)
            outputs = read_all(kafka_bootstrap, out, max_s=30)
    finally:
        codes = [toy.stop() for toy in toys]

    assert codes == [0, 0], f"toys did not stop cleanly: {codes}"
    outputs = read_all(kafka_bootstrap, out, max_s=30)
    ids = Counter((m.value() or b"").split(b":")[0] for m in outputs)
    missing = TOTAL - len(ids)
    repeated = sum(1 for n in ids.values() if n > 1)
    assert (missing, repeated) == (0, 0), f"{missing} inputs lost, {repeated} repeated"
    per_key: dict[bytes, list[int]] = {}
    for m in outputs:
        per_key.setdefault(m.key() or b"", []).append(int((m.value() or b"").split(b":")[1]))
    assert all(sorted(c) == list(range(1, len(c) + 1)) for c in per_key.values())
    truth = Counter(key for key, _ in sent)
    assert read_table(kafka_bootstrap, changelog) == {k: str(v).encode() for k, v in truth.items()}
    assert sum(t.kills for t in toys) >= MIN_KILLS, "the chaos did not happen"
    # Kills landed inside open transactions: their outputs exist, aborted, and stay invisible.
    assert len(read_all(kafka_bootstrap, out, max_s=30, committed=False)) > TOTAL
