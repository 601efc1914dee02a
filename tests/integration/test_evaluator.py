"""The evaluator on the real broker and Redis: decisions, receipts, dedupe, lifecycle, grants."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from consumers.commands import CommandDeps, CommandProcessor, CommandSettings
from consumers.evaluator.metrics import EvaluatorMetrics, evaluator_metrics
from consumers.evaluator.plan import Plan, effective_state
from consumers.evaluator.stage import EvaluatorDeps, EvaluatorSettings, EvaluatorStage
from pipeline.cli.group import vigil
from pipeline.clock import ManualClock
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.watcher import Watch
from pipeline.records.watcher_state import decode_state
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.authz import Action, Grant
from pipeline.rules.budgets import BudgetCaps, BudgetScope, Dimension
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.keys import EventTrigger, canonical_json, delivery_key, watcher_key
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.outcomes import Reason
from tests.integration.evaluator_helpers import (
    Writer,
    event_definition,
    make_topology,
    outbox_entries,
    poll_definition,
    receipts,
    wait_for,
)
from tests.integration.runtime_helpers import read_all, read_table

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PARTITIONS = 3
NOW = datetime.now(UTC).replace(microsecond=0)
SOURCE, TYPE = "ci.pipeline", "build.finished"


@dataclass
class Running:
    topology: Topology
    writer: Writer
    metrics: EvaluatorMetrics
    clock: ManualClock
    tenant: str
    registry: CollectorRegistry

    def consumed(self, topic: Topic) -> float:
        """Input records of ``topic`` the evaluator has processed (the runtime's counter)."""
        labels = {"group": f"{self.topology.prefix}evaluator", "topic": self.topology.name(topic)}
        found = self.registry.get_sample_value("vigil_runtime_records_consumed_total", labels)
        return found or 0.0


@pytest.fixture
def start(kafka_bootstrap: str, redis_url: str) -> Iterator[Callable[..., Running]]:
    """Start an evaluator thread on a fresh topology; stopped (commit, leave) at the end."""
    stops: list[tuple[threading.Event, threading.Thread]] = []

    def make(url: str = redis_url, evaluators: frozenset[str] = frozenset()) -> Running:
        topology = make_topology(kafka_bootstrap, PARTITIONS)
        registry = CollectorRegistry()
        metrics = evaluator_metrics(registry)
        clock = ManualClock(NOW)
        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        budgets = RedisBudgets(client, key_prefix=f"test:{uuid.uuid4().hex[:8]}:")
        caps = BudgetCaps(window=timedelta(hours=1), evaluations=1000)
        settings = EvaluatorSettings(
            kafka_bootstrap, topology, "one", default_caps=caps, evaluators=evaluators
        )
        deps = EvaluatorDeps(budgets, clock=clock, metrics_registry=registry)
        stage = EvaluatorStage(settings, deps)
        stop = threading.Event()
        thread = threading.Thread(target=stage.run, args=(stop,), daemon=True)
        thread.start()
        stops.append((stop, thread))
        writer = Writer(kafka_bootstrap, topology)
        return Running(topology, writer, metrics, clock, uuid.uuid4().hex[:8], registry)

    yield make
    for stop, thread in stops:
        stop.set()
        thread.join(60)
        assert not thread.is_alive()


@pytest.fixture
def running(start: Callable[..., Running]) -> Running:
    return start()


def key_of(tenant: str, user: str, event_id: str, watcher_id: str = "release-build-failed") -> str:
    return delivery_key(
        tenant_id=tenant,
        user_id=user,
        watcher_id=watcher_id,
        watcher_version=1,
        source_id=SOURCE,
        trigger=EventTrigger(TYPE, event_id),
    )


def reasons_of(bootstrap: str, topology: Topology) -> dict[str, list[str]]:
    """Reason codes per event id, in the order they were decided."""
    out: dict[str, list[str]] = {}
    for receipt, _ in receipts(bootstrap, topology):
        out.setdefault(receipt.trigger.get("event_id", "?"), []).append(receipt.reason.value)
    return out


def count(bootstrap: str, topology: Topology) -> Callable[[], int]:
    return lambda: len(receipts(bootstrap, topology))


def test_events_yield_expected_outbox_keys_and_receipt_reasons(
    kafka_bootstrap: str, running: Running
) -> None:
    w, tenant = running.writer, running.tenant
    for user in ("u-1", "u-2"):  # two subjects, the same watcher id
        w.grant(tenant, user, [SOURCE], f"g-{user}")
        w.watcher(event_definition(tenant, user))
    w.event(SOURCE, TYPE, "b-1", {"status": "failed"}, NOW - timedelta(minutes=1))
    w.event(SOURCE, TYPE, "b-2", {"status": "passed"}, NOW - timedelta(minutes=1))
    w.event(SOURCE, TYPE, "b-3", {"status": "failed"}, NOW - timedelta(minutes=11))
    w.event(SOURCE, TYPE, "b-4", {"status": "failed"}, NOW + timedelta(seconds=31))
    w.event(SOURCE, "build.started", "b-5", {"status": "failed"}, NOW)
    w.event(SOURCE, TYPE, "b-6", {"status": "failed"}, NOW + timedelta(seconds=30))
    wait_for(lambda: count(kafka_bootstrap, running.topology)() >= 10, what="10 receipts")
    # the same event again, with a new envelope id and cursor
    w.event(SOURCE, TYPE, "b-1", {"status": "failed"}, NOW, envelope_id="env-2", cursor="982")
    wait_for(lambda: count(kafka_bootstrap, running.topology)() >= 12, what="12 receipts")

    reasons = reasons_of(kafka_bootstrap, running.topology)
    assert reasons == {
        "b-1": ["condition_true"] * 4,
        "b-2": ["condition_false"] * 2,
        "b-3": ["stale"] * 2,
        "b-4": ["future_skew"] * 2,
        "b-6": ["condition_true"] * 2,
    }, "wrong-type b-5 reaches no watcher; every other event one receipt per subject"
    entries = outbox_entries(kafka_bootstrap, running.topology)
    keys = Counter(entry.delivery_key for entry in entries)
    expected = {key_of(tenant, user, e) for user in ("u-1", "u-2") for e in ("b-1", "b-6")}
    assert set(keys) == expected and set(keys.values()) == {1}, "one entry per trigger, no repeat"
    assert {entry.user_id for entry in entries} == {"u-1", "u-2"}
    repeats = [r for r, _ in receipts(kafka_bootstrap, running.topology)][-2:]
    assert all(r.delivery_key is None and "already applied" in r.note for r in repeats)
    home = partition_for(SOURCE, PARTITIONS)
    assert {p for _, p in receipts(kafka_bootstrap, running.topology)} == {home}
    states = read_table(kafka_bootstrap, running.topology.name(Topic.WATCHER_STATE))
    assert set(states) == {watcher_key(tenant, u, "release-build-failed") for u in ("u-1", "u-2")}
    assert running.metrics.outbox_entries._value.get() == 4


def test_pause_stops_decisions_resume_restarts_and_revoked_grant_is_denied(
    kafka_bootstrap: str, running: Running
) -> None:
    w, tenant, topology = running.writer, running.tenant, running.topology
    definition = event_definition(tenant, "u-1")
    w.grant(tenant, "u-1", [SOURCE], "g-1")
    w.watcher(definition)
    fresh = NOW - timedelta(minutes=1)
    receipts_seen = count(kafka_bootstrap, topology)

    w.event(SOURCE, TYPE, "b-1", {"status": "failed"}, fresh)
    wait_for(lambda: receipts_seen() >= 1, what="the first decision")
    w.watcher(definition, status="paused", revision=2)
    w.event(SOURCE, TYPE, "b-2", {"status": "failed"}, fresh)
    wait_for(lambda: receipts_seen() >= 2, what="the paused decision")
    w.watcher(definition, status="active", revision=3)
    w.event(SOURCE, TYPE, "b-3", {"status": "failed"}, fresh)
    wait_for(lambda: receipts_seen() >= 3, what="the resumed decision")
    w.revoke("g-1")
    w.event(SOURCE, TYPE, "b-4", {"status": "failed"}, fresh)
    wait_for(lambda: receipts_seen() >= 4, what="the denied decision")

    assert reasons_of(kafka_bootstrap, topology) == {
        "b-1": ["condition_true"],
        "b-2": ["not_active"],
        "b-3": ["condition_true"],
        "b-4": ["authorization_denied"],
    }
    keys = {e.delivery_key for e in outbox_entries(kafka_bootstrap, topology)}
    assert keys == {key_of(tenant, "u-1", "b-1"), key_of(tenant, "u-1", "b-3")}
    denied = receipts(kafka_bootstrap, topology)[-1][0]
    assert denied.authorized is False and "replay" in denied.note
    states = read_table(kafka_bootstrap, topology.name(Topic.WATCHER_STATE))
    state = decode_state(default_codec(), states[watcher_key(tenant, "u-1", definition.watcher_id)])
    assert state.checkpoint is not None
    assert state.checkpoint.trigger["event_id"] == "b-3", "a denial leaves the cursor in place"
    lag = {"topic": topology.name(Topic.EVENTS), "partition": str(partition_for(SOURCE, 3))}
    wait_for(
        lambda: running.registry.get_sample_value("vigil_evaluator_consumer_lag", lag) == 0,
        what="librdkafka statistics to report the caught-up partition's lag as 0",
    )


def test_foreign_partition_event_is_rerouted_ticks_reach_named_watcher_and_cancel_tombstones(
    kafka_bootstrap: str, start: Callable[..., Running]
) -> None:
    running = start(evaluators=frozenset({"http.json@v1"}))
    w, tenant, topology = running.writer, running.tenant, running.topology
    watched = event_definition(tenant, "u-1")
    polls = [poll_definition(tenant, "u-1", f"page-{n}") for n in (1, 2)]
    w.grant(tenant, "u-1", [SOURCE, "status.page"], "g-1", tools=["status-page"])
    w.watcher(watched)
    for definition in polls:
        w.watcher(definition)
    home = partition_for(SOURCE, PARTITIONS)
    w.producer.produce(topology.name(Topic.EVENTS), b"not avro", SOURCE.encode(), home)
    w.event(SOURCE, TYPE, "b-1", {"status": "failed"}, NOW, partition=(home + 1) % PARTITIONS)
    w.tick(polls[0], NOW.replace(second=0), {"status": "down"})
    receipts_seen = count(kafka_bootstrap, topology)
    wait_for(lambda: receipts_seen() >= 2, what="two decisions")

    decided = receipts(kafka_bootstrap, topology)
    assert sorted(r.watcher_id for r, _ in decided) == ["page-1", "release-build-failed"]
    assert running.metrics.rerouted.labels(topology.name(Topic.EVENTS))._value.get() == 1
    assert {p for r, p in decided if r.watcher_id == "release-build-failed"} == {home}
    assert len(outbox_entries(kafka_bootstrap, topology)) == 2
    dead = read_all(kafka_bootstrap, topology.name(Topic.DEAD_LETTER), max_s=30)
    assert [m.value() for m in dead] == [b"not avro"], "a poison record is set aside, not fatal"

    state_key = watcher_key(tenant, "u-1", watched.watcher_id)
    assert state_key in read_table(kafka_bootstrap, topology.name(Topic.WATCHER_STATE))
    w.watcher(watched, status="cancelled", revision=2)
    w.lifecycle_cancel(watched)
    w.event(SOURCE, TYPE, "b-2", {"status": "failed"}, NOW)  # any input of that partition
    wait_for(
        lambda: state_key not in read_table(kafka_bootstrap, topology.name(Topic.WATCHER_STATE)),
        what="the cancelled watcher's state tombstone",
    )
    assert len(receipts(kafka_bootstrap, topology)) == 2, "a cancelled watcher is not evaluated"


def test_unreachable_budget_store_defers_evaluation_until_it_answers(
    kafka_bootstrap: str, start: Callable[..., Running], tmp_path: Path
) -> None:
    port = free_port()
    running = start(url=f"redis://127.0.0.1:{port}/0")
    w, tenant, topology = running.writer, running.tenant, running.topology
    w.grant(tenant, "u-1", [SOURCE], "g-1")
    w.watcher(event_definition(tenant, "u-1"))
    w.event(SOURCE, TYPE, "b-1", {"status": "failed"}, NOW)
    down = running.metrics.budget_store_down
    wait_for(lambda: down._value.get() >= 2, what="two aborted attempts")
    assert receipts(kafka_bootstrap, topology) == [], "nothing is decided unbudgeted"
    assert outbox_entries(kafka_bootstrap, topology) == []

    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: len(receipts(kafka_bootstrap, topology)) >= 1, what="the decision")
        assert [r.reason for r, _ in receipts(kafka_bootstrap, topology)] == [Reason.CONDITION_TRUE]
        keys = [e.delivery_key for e in outbox_entries(kafka_bootstrap, topology)]
        assert keys == [key_of(tenant, "u-1", "b-1")]
    finally:
        server.terminate()
        server.wait(10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_budget_exhausted_mid_batch_suppresses_the_rest_without_double_charging(
    kafka_bootstrap: str, running: Running
) -> None:
    w, tenant, topology = running.writer, running.tenant, running.topology
    budgets = {"window": "1h", "evaluations": 2}
    w.grant(tenant, "u-1", [SOURCE], "g-1")
    w.watcher(event_definition(tenant, "u-1", budgets=budgets))
    for n in range(1, 5):  # one flush: normally one batch, settled with one Redis round trip
        w.event(SOURCE, TYPE, f"b-{n}", {"status": "failed"}, NOW, flush=False)
    w.flush()
    wait_for(lambda: count(kafka_bootstrap, topology)() >= 4, what="four decisions")
    w.event(SOURCE, TYPE, "b-5", {"status": "failed"}, NOW)
    wait_for(lambda: count(kafka_bootstrap, topology)() >= 5, what="the fifth decision")

    assert reasons_of(kafka_bootstrap, topology) == {
        "b-1": ["condition_true"],
        "b-2": ["condition_true"],
        "b-3": ["budget_exhausted"],
        "b-4": ["budget_exhausted"],
        "b-5": ["budget_exhausted"],
    }
    keys = {e.delivery_key for e in outbox_entries(kafka_bootstrap, topology)}
    assert keys == {key_of(tenant, "u-1", "b-1"), key_of(tenant, "u-1", "b-2")}
    assert running.metrics.budget_suppressions._value.get() == 3
    exhausted = receipts(kafka_bootstrap, topology)[-1][0]
    assert exhausted.payload is None, "budget-rejected evidence keeps no payload"


def test_plan_settles_one_batch_in_one_round_trip_and_redoes_only_the_refused_watcher(
    redis_url: str,
) -> None:
    tenant = uuid.uuid4().hex[:8]
    budgets = RedisBudgets(redis.Redis.from_url(redis_url), key_prefix=f"test:{tenant}:")
    capped = event_definition(tenant, "u-1", budgets={"window": "1h", "evaluations": 2})
    free = event_definition(tenant, "u-2")
    grants = tuple(
        Grant(
            grant_id=f"g-{user}",
            tenant_id=tenant,
            user_id=user,
            purpose="ops.alert",
            sources=frozenset({SOURCE}),
            actions=frozenset({Action.EVALUATE}),
            until=NOW + timedelta(days=1),
        )
        for user in ("u-1", "u-2")
    )
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=1000)
    plan = Plan(budgets, caps, NOW)
    watches = [watch_of(capped), watch_of(free)]
    for offset in range(4):
        evidence = Evidence(
            source_kind=EvidenceKind.EVENT,
            source_id=SOURCE,
            observed_at=NOW,
            event_type=TYPE,
            event_id=f"b-{offset}",
            payload={"status": "failed"},
        )
        for watch in watches:
            state = plan.state_of(watch.key) or effective_state(watch, None)
            plan.add(watch, state, evidence, ("events", 0, offset), grants)
    steps = plan.settle()

    reasons = [(s.watch.parts[1], s.result.reason.value) for s in steps if s.result]
    assert reasons == [
        ("u-1", "condition_true"), ("u-2", "condition_true"),
        ("u-1", "condition_true"), ("u-2", "condition_true"),
        ("u-1", "budget_exhausted"), ("u-2", "condition_true"),
        ("u-1", "budget_exhausted"), ("u-2", "condition_true"),
    ]  # fmt: skip
    scope = BudgetScope(tenant, "u-1", capped.watcher_id)
    limited = BudgetCaps(window=timedelta(hours=1), evaluations=2)
    used = budgets.usage(scope, limited.with_defaults(caps), NOW)
    assert used[Dimension.EVALUATIONS] == 2, "refused charges and re-sent tokens count nothing"


def watch_of(definition: WatcherDefinition) -> Watch:
    assert definition.version is not None
    return Watch(
        key=watcher_key(*definition.watcher_key),
        parts=definition.watcher_key,
        source_id=definition.source_id,
        event_type=TYPE,
        version=definition.version,
        revision=1,
        status=WatcherStatus.ACTIVE,
        activated_at=None,
        definition_json=canonical_json(definition.to_json()).decode(),
    )


def test_watch_created_with_the_cli_decides_events_and_follows_pause_resume_and_revoke(
    kafka_bootstrap: str, running: Running, tmp_path: Path
) -> None:
    topology, tenant = running.topology, running.tenant
    stop = threading.Event()
    processor = CommandProcessor(CommandSettings(kafka_bootstrap, topology, "e2e"), CommandDeps())
    thread = threading.Thread(target=processor.run, args=(stop,), daemon=True)
    thread.start()
    config = tmp_path / "vigil.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\ntopic_prefix = "{topology.prefix}"\n'
        f'partitions = {PARTITIONS}\n\n[subject]\ntenant_id = "{tenant}"\nuser_id = "me"\n'
        '[operator]\nname = "test"\n',
        encoding="utf-8",
    )

    def cli(*args: str, stdin: str | None = None) -> str:
        result = CliRunner().invoke(vigil, ["--config", str(config), *args], input=stdin)
        assert result.exit_code == 0, result.output + result.stderr
        return result.stdout

    def publish(event_id: str) -> None:
        running.writer.event(SOURCE, TYPE, event_id, {"status": "failed"}, NOW)

    seen = count(kafka_bootstrap, topology)
    try:
        grant_id = cli(
            "--as-operator", "grant", "add", "--tenant", tenant, "--user", "me",
            "--purpose", "ops.alert",
            "--source", SOURCE, "--target", "ops-hook", "--actions", "evaluate,manage",
            "--until", "30d",
        ).strip()  # fmt: skip
        body = event_definition(tenant, "me").to_json()
        for name in ("tenant_id", "user_id", "version"):
            body.pop(name)
        cli("watch", "create", "-f", "-", stdin=json.dumps(body))
        publish("b-1")
        wait_for(lambda: seen() >= 1, what="the first decision")
        cli("watch", "pause", "release-build-failed")
        publish("b-2")
        wait_for(lambda: seen() >= 2, what="the paused decision")
        cli("watch", "resume", "release-build-failed")
        publish("b-3")
        wait_for(lambda: seen() >= 3, what="the resumed decision")
        cli("--as-operator", "grant", "revoke", "--id", grant_id)
        publish("b-4")
        wait_for(lambda: seen() >= 4, what="the denied decision")
    finally:
        stop.set()
        thread.join(60)
    assert reasons_of(kafka_bootstrap, topology) == {
        "b-1": ["condition_true"],
        "b-2": ["not_active"],
        "b-3": ["condition_true"],
        "b-4": ["authorization_denied"],
    }
    keys = {e.delivery_key for e in outbox_entries(kafka_bootstrap, topology)}
    assert keys == {key_of(tenant, "me", "b-1"), key_of(tenant, "me", "b-3")}


def test_satisfied_once_watch_is_closed_through_the_command_processor(
    kafka_bootstrap: str, running: Running, tmp_path: Path
) -> None:
    topology, tenant = running.topology, running.tenant
    stop = threading.Event()
    processor = CommandProcessor(
        CommandSettings(kafka_bootstrap, topology, "e2e-close"), CommandDeps()
    )
    thread = threading.Thread(target=processor.run, args=(stop,), daemon=True)
    thread.start()
    config = tmp_path / "vigil.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\ntopic_prefix = "{topology.prefix}"\n'
        f'partitions = {PARTITIONS}\n\n[subject]\ntenant_id = "{tenant}"\nuser_id = "me"\n'
        '[operator]\nname = "test"\n',
        encoding="utf-8",
    )

    def cli(*args: str, stdin: str | None = None) -> str:
        result = CliRunner().invoke(vigil, ["--config", str(config), *args], input=stdin)
        assert result.exit_code == 0, result.output + result.stderr
        return result.stdout

    try:
        cli(
            "--as-operator", "grant", "add", "--tenant", tenant, "--user", "me",
            "--purpose", "ops.alert",
            "--source", SOURCE, "--target", "ops-hook", "--actions", "evaluate,manage",
            "--until", "30d",
        )  # fmt: skip
        body = event_definition(tenant, "me", mode="once").to_json()
        for name in ("tenant_id", "user_id", "version"):
            body.pop(name)
        cli("watch", "create", "-f", "-", stdin=json.dumps(body))
        running.writer.event(SOURCE, TYPE, "b-1", {"status": "failed"}, NOW)

        def status() -> str:
            view = json.loads(cli("watch", "show", "release-build-failed", "--json"))
            return str(view["status"])

        wait_for(lambda: status() == "satisfied", what="the close command to land")
        running.writer.event(SOURCE, TYPE, "b-2", {"status": "failed"}, NOW)
        running.writer.event(SOURCE, TYPE, "b-3", {"status": "passed"}, NOW)
        wait_for(lambda: running.consumed(Topic.EVENTS) >= 3, what="b-2 and b-3 consumed")
    finally:
        stop.set()
        thread.join(60)
    assert running.metrics.close_commands.labels("satisfied")._value.get() == 1
    assert reasons_of(kafka_bootstrap, topology) == {"b-1": ["condition_true"]}
    keys = {e.delivery_key for e in outbox_entries(kafka_bootstrap, topology)}
    assert keys == {key_of(tenant, "me", "b-1")}, "a closed watch decides nothing more"
