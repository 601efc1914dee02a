"""``vigil replay`` over a real 10,000-event run: the command processor and the evaluator decide
on the real broker and Redis, then replay re-derives every decision from the topics."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from consumers.commands import CommandDeps, CommandProcessor, CommandSettings
from consumers.evaluator.stage import EvaluatorDeps, EvaluatorSettings, EvaluatorStage
from pipeline.cli.group import vigil
from pipeline.clock import ManualClock
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.topics import Topology
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.keys import EventTrigger, delivery_key
from tests.integration.evaluator_helpers import Writer, make_topology, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

EVENTS = 10_000
SOURCE, TYPE, WATCHER = "ci.pipeline", "build.finished", "release-build-failed"
NOW = datetime.now(UTC).replace(microsecond=0)


@dataclass
class Run:
    topology: Topology
    tenant: str
    config: Path
    registry: CollectorRegistry
    writer: Writer

    def cli(self, *args: str, stdin: str | None = None, code: int = 0) -> str:
        result = CliRunner().invoke(vigil, ["--config", str(self.config), *args], input=stdin)
        assert result.exit_code == code, result.output + result.stderr
        return result.stdout

    def evaluations(self) -> float:
        total = 0.0
        for metric in self.registry.collect():
            if metric.name == "vigil_evaluator_evaluations":
                total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
        return total

    def key(self, event_id: str) -> str:
        return delivery_key(
            tenant_id=self.tenant,
            user_id="me",
            watcher_id=WATCHER,
            watcher_version=1,
            source_id=SOURCE,
            trigger=EventTrigger(TYPE, event_id),
        )


def definition(condition: dict[str, Any]) -> str:
    return json.dumps(
        {
            "watcher_id": WATCHER,
            "purpose": "ops.alert",
            "source": {"kind": "event", "source_id": SOURCE, "event_type": TYPE, "max_age": "1h"},
            "condition": condition,
            "delivery": {"target": "ops-hook", "verb": "notify"},
            "expires_at": "2030-01-01T00:00:00Z",
            "privacy": {"retain_paths": ["status"]},
        }
    )


def status_of(n: int) -> str:
    return "failed" if n % 3 == 0 else "passed"


def branch_of(n: int) -> str:
    return "main" if n % 2 == 0 else "release/1"


@pytest.fixture(scope="module")
def recorded(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Run]:
    """A watcher created through the CLI and 10,000 events decided by a real evaluator."""
    topology = make_topology(kafka_bootstrap, 2, "replay")
    tenant = uuid.uuid4().hex[:8]
    config = tmp_path_factory.mktemp("replay") / "vigil.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\ntopic_prefix = "{topology.prefix}"\n'
        f'partitions = 2\n\n[subject]\ntenant_id = "{tenant}"\nuser_id = "me"\n'
        '[operator]\nname = "test"\n',
        encoding="utf-8",
    )
    registry = CollectorRegistry()
    client = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
    budgets = RedisBudgets(client, key_prefix=f"test:{tenant}:")
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=1_000_000)
    stage = EvaluatorStage(
        EvaluatorSettings(kafka_bootstrap, topology, "replay", default_caps=caps),
        EvaluatorDeps(budgets, clock=ManualClock(NOW), metrics_registry=registry),
    )
    stop = threading.Event()
    processor = CommandProcessor(
        CommandSettings(kafka_bootstrap, topology, "replay"), CommandDeps()
    )
    threads = [
        threading.Thread(target=stage.run, args=(stop,), daemon=True),
        threading.Thread(target=processor.run, args=(stop,), daemon=True),
    ]
    for thread in threads:
        thread.start()
    state = Run(topology, tenant, config, registry, Writer(kafka_bootstrap, topology))
    try:
        state.cli(
            "--as-operator", "grant", "add", "--tenant", tenant, "--user", "me",
            "--purpose", "ops.alert",
            "--source", SOURCE, "--target", "ops-hook", "--actions", "evaluate,manage",
            "--until", "30d",
        )  # fmt: skip
        state.cli("watch", "create", "-f", "-", stdin=definition({"eq": ["status", "failed"]}))
        for n in range(EVENTS):
            payload = {"status": status_of(n), "branch": branch_of(n)}
            state.writer.event(SOURCE, TYPE, f"b-{n}", payload, NOW, flush=False)
        state.writer.flush()
        wait_for(lambda: state.evaluations() >= EVENTS, 180, "10,000 evaluations")
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    yield state


def test_replay_of_unchanged_run_reports_zero_differences(recorded: Run) -> None:
    out = json.loads(recorded.cli("replay", "--from", "earliest", "--to", "latest", "--json"))
    assert out["replayed"] == EVENTS
    assert out["difference_count"] == 0
    assert out["skipped"] == {}
    assert out["reasons"] == {
        "condition_true": len([n for n in range(EVENTS) if status_of(n) == "failed"]),
        "condition_false": len([n for n in range(EVENTS) if status_of(n) == "passed"]),
    }


def test_replay_with_changed_condition_reports_exactly_the_keys_that_change(
    recorded: Run, tmp_path: Path
) -> None:
    changed = tmp_path / "changed.json"
    only_main = {"all": [{"eq": ["status", "failed"]}, {"eq": ["branch", "main"]}]}
    changed.write_text(definition(only_main), encoding="utf-8")
    out = json.loads(recorded.cli("replay", "--definition", str(changed), "--json"))
    expected = sorted(
        recorded.key(f"b-{n}")
        for n in range(EVENTS)
        if status_of(n) == "failed" and branch_of(n) != "main"
    )
    assert out["replayed"] == EVENTS
    assert out["would_not_fire"] == expected
    assert out["would_fire"] == []
    assert out["affected_keys"] == expected


def test_replay_of_an_offset_range_replays_only_that_range(recorded: Run) -> None:
    home = partition_for(SOURCE, 2)  # one source: every event is on its partition
    result = CliRunner().invoke(
        vigil,
        ["--config", str(recorded.config), "replay", "--from", f"events:{home}:100",
         "--to", f"events:{home}:130"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "replayed 30 evaluations: 0 differences" in result.stdout
    assert "replay: read 30 inputs" in result.stderr


def test_replay_of_a_time_range_selects_inputs_by_arrival(recorded: Run) -> None:
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    earlier = (NOW - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    after = json.loads(recorded.cli("replay", "--from", later, "--json"))
    assert after["replayed"] == 0
    spanning = json.loads(recorded.cli("replay", "--from", earlier, "--to", later, "--json"))
    assert spanning["replayed"] == EVENTS and spanning["difference_count"] == 0


def test_replay_scoped_to_a_watcher_or_subject_replays_only_its_evaluations(recorded: Run) -> None:
    home = partition_for(SOURCE, 2)
    window = ("--from", f"events:{home}:0", "--to", f"events:{home}:50")
    key = json.dumps([recorded.tenant, "me", WATCHER])
    mine = json.loads(recorded.cli("replay", *window, "--watcher", key, "--json"))
    assert mine["replayed"] == 50 and mine["difference_count"] == 0
    other = json.loads(recorded.cli("replay", *window, "--subject", "nobody/else", "--json"))
    assert other["replayed"] == 0
