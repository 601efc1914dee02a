"""The pause a joining evaluator causes: classic (eager) against KIP-848 (incremental) rebalances.

``python -m benchmarks.rebalance`` builds the evaluator benchmark's world with ``BENCH_WATCHERS``
(default 100,000) watchers on sources no event names plus 1,000 matching ones on 100 sources,
then, once per group protocol (``classic``, ``consumer``), on a fresh group: member A (this
process) holds every partition, steps continuously while events arrive at ``BENCH_RATE`` (default
200/s), and member B (a second process: ``--member``) joins the group. A's **pause** is its
longest step between B's start and the group settling plus two seconds (a rebalance runs inside
A's poll: revoke, commit, restore what it keeps or gains); also reported: partition numbers A
restored during the join (classic: everything it keeps; KIP-848: nothing) and how long the
group took to settle. Prints one JSON object. Env: ``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL``,
``VIGIL_MASTER_KEYS`` (set for both members; a fresh one is made when unset).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from prometheus_client import CollectorRegistry

from benchmarks.evaluator import PARTITIONS, _Loader, _world
from consumers.evaluator.stage import EvaluatorDeps, EvaluatorSettings, EvaluatorStage
from pipeline.crypto import generate_kek_text
from pipeline.kafka.topics import Topology
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import BudgetCaps
from pipeline.runtime.app import GroupProtocol, StreamApp

__all__ = ["main"]

_SETTLE_S = 120.0


def _app(
    bootstrap: str, redis_url: str, topology: Topology, group: str, name: str, protocol: str
) -> tuple[StreamApp, EvaluatorStage, CollectorRegistry]:
    registry = CollectorRegistry()
    budgets = RedisBudgets(redis.Redis.from_url(redis_url), key_prefix=f"bench:{topology.prefix}")
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=10_000_000)
    settings = EvaluatorSettings(
        bootstrap,
        topology,
        name,
        group_id=group,
        group_protocol=GroupProtocol(protocol),
        default_caps=caps,
    )
    stage = EvaluatorStage(settings, EvaluatorDeps(budgets, metrics_registry=registry))
    return stage.app, stage, registry


def _member(argv: list[str]) -> None:
    """Member B: join, step until SIGTERM, leave."""
    prefix, group, protocol = argv
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    app, _, _ = _app(bootstrap, redis_url, Topology(prefix, PARTITIONS), group, "b", protocol)
    with app:
        while not stop.is_set():
            app.step()


def _publish(loader: _Loader, sources: list[str], rate: float, stop: threading.Event) -> None:
    i = 0
    started = time.monotonic()
    while not stop.is_set():
        due = started + i / rate
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
        loader.events(1, sources, first=1_000_000 + i)
        i += 1


def _join(
    bootstrap: str,
    redis_url: str,
    topology: Topology,
    loader: _Loader,
    sources: list[str],
    protocol: str,
    rate: float,
) -> dict[str, Any]:
    group = f"{topology.prefix}evaluator-{protocol}"
    app, stage, registry = _app(bootstrap, redis_url, topology, group, "a", protocol)
    restored = {"group": group}

    def restores() -> float:
        found = registry.get_sample_value("vigil_runtime_restored_partitions_total", restored)
        return found or 0.0

    stop = threading.Event()
    with app:
        deadline = time.monotonic() + _SETTLE_S
        while len(app.assignment()) < 2 * PARTITIONS and time.monotonic() < deadline:
            app.step()
        indexed = stage.prepare(compile_definitions=True)
        publisher = threading.Thread(target=_publish, args=(loader, sources, rate, stop))
        publisher.start()
        for _ in range(40):  # warm: a few seconds of steady steps
            app.step()
        before = restores()
        command = [sys.executable, "-m", "benchmarks.rebalance", "--member"]
        member = subprocess.Popen([*command, topology.prefix, group, protocol])
        joined = time.monotonic()
        longest, settled_at = 0.0, None
        try:
            while time.monotonic() < joined + _SETTLE_S:
                began = time.monotonic()
                app.step()
                longest = max(longest, time.monotonic() - began)
                if settled_at is None and len(app.assignment()) == PARTITIONS:
                    settled_at = time.monotonic()
                if settled_at is not None and time.monotonic() > settled_at + 2:
                    break
        finally:
            member.send_signal(signal.SIGTERM)
            member.wait(60)
            stop.set()
            publisher.join(30)
    return {
        "protocol": protocol,
        "watchers_indexed_before_join": indexed,
        "pause_s": round(longest, 3),
        "settle_s": None if settled_at is None else round(settled_at - joined, 3),
        "partitions_restored_by_a_during_join": restores() - before,
    }


def main() -> None:
    if sys.argv[1:2] == ["--member"]:
        _member(sys.argv[2:])
        return
    os.environ.setdefault("VIGIL_MASTER_KEYS", generate_kek_text("bench"))
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    watchers = int(os.environ.get("BENCH_WATCHERS", "100000"))
    rate = float(os.environ.get("BENCH_RATE", "200"))
    topology, loader, sources = _world(bootstrap, 100, watchers)
    runs = [
        _join(bootstrap, redis_url, topology, loader, sources, protocol, rate)
        for protocol in ("classic", "consumer")
    ]
    print(
        json.dumps(
            {
                "benchmark": "rebalance",
                "watchers": watchers + 1_000,
                "partitions": PARTITIONS,
                "events_per_s": rate,
                "at": datetime.now(UTC).isoformat(),
                "runs": runs,
                "goal_pause_s": 2.0,
            }
        )
    )


if __name__ == "__main__":
    main()
