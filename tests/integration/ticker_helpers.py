"""Real-broker helpers for the poll ticker tests: a deployment (topics, watchers, grants, run
states, tickers, committed ticks), the ticker and evaluator stepped on one ManualClock, a local
GET server for http.json@v1, and the definitions the tests use.

Watchers and grants are written with the record shapes the command processor uses
(``schemas/watcher.v2.avsc``, :class:`pipeline.rules.commands.model.GrantRecord`), keyed and placed
as DESIGN.md §2 says, so the ticker cannot tell them apart from the processor's: data keys first,
the definition sealed. Ticks and outbox entries are read back opened, with their sealed JSON
fields as text, as the tests compare them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from pipeline.clock import ManualClock
from pipeline.config import ToolConfig
from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.clients import producer_config
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.event import event_record
from pipeline.records.grant import encode_grant
from pipeline.records.outbox_entry import outbox_identity
from pipeline.records.sealing import open_fields
from pipeline.records.tick import tick_payload
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.authz import Action, Grant
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.commands.model import GrantRecord
from pipeline.rules.data_keys import KeyOwner, evidence_owner, subject_owner
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.keys import canonical_json, watcher_key
from pipeline.rules.lifecycle import WatcherStatus
from producers.ticker.loop import PollTicker, TickerDeps, TickerSettings
from tests.integration.runtime_helpers import read_all, read_table
from tests.keyring import sealed_definition

__all__ = [
    "CODEC",
    "PARTITIONS",
    "TENANT",
    "USER",
    "Deployment",
    "Pipeline",
    "StatusServer",
    "TickerOnly",
    "agent_watch",
    "http_definition",
    "outbox",
    "polling_definition",
    "schedule_definition",
    "settle",
    "walk",
    "watcher_status",
]

PARTITIONS = 2
TENANT, USER = "acme", "u-42"
CODEC = default_codec()


class Deployment:
    """One test's topics, a plain producer for inputs, and tickers that share one identity."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.topology = Topology(prefix=prefix, partitions=PARTITIONS)
        ensure_topics(connect_admin(bootstrap), self.topology)
        self.producer = Producer(producer_config(bootstrap))
        self.metrics_registry = CollectorRegistry()
        self.ring = KeyRing(KeyEncryptionKeys.load(), CODEC)

    def key(self, owner: KeyOwner) -> None:
        if self.ring.record(owner) is None:
            topic_key, raw = self.ring.create(owner, datetime(2026, 1, 1, tzinfo=UTC))
            self.send(Topic.KEYS, topic_key, raw, owner.subject_key)

    def name(self, topic: Topic) -> str:
        return self.topology.name(topic)

    def send(self, topic: Topic, key: str, value: bytes | None, partition_key: str) -> None:
        self.producer.produce(
            self.name(topic), value, key, partition_for(partition_key, PARTITIONS)
        )
        assert self.producer.flush(30) == 0

    def watcher(
        self,
        definition: WatcherDefinition,
        activated_at: datetime,
        status: WatcherStatus = WatcherStatus.ACTIVE,
    ) -> None:
        """A ``watchers`` record as the command processor writes it (created active)."""
        assert definition.version is not None
        tenant, user, watcher_id = definition.watcher_key
        self.key(subject_owner(tenant, user))
        self.key(evidence_owner(tenant, user, watcher_id, definition.version))
        source = definition.source
        value = CODEC.encode(
            "watcher",
            {
                "tenant_id": definition.tenant_id,
                "user_id": definition.user_id,
                "watcher_id": definition.watcher_id,
                "version": definition.version,
                "revision": 1,
                "status": status.value,
                "source_kind": source.kind,
                "source_id": definition.source_id,
                "event_type": getattr(source, "event_type", None),
                "session_id": definition.session_id,
                "activated_at": activated_at,
                "updated_at": activated_at,
                "definition": None,
                "sealed": sealed_definition(self.ring, definition),
            },
        )
        key = watcher_key(*definition.watcher_key)
        self.send(Topic.WATCHERS, key, value, definition.source_id)

    def grant(self, sources: set[str], tools: set[str], purpose: str, targets: set[str]) -> None:
        grant = Grant(
            grant_id=f"g-{len(sources)}-{sorted(sources)[0]}",
            tenant_id=TENANT,
            user_id=USER,
            purpose=purpose,
            sources=frozenset(sources),
            tools=frozenset(tools),
            targets=frozenset(targets),
            actions=frozenset({Action.EVALUATE, Action.DELIVER}),
            until=datetime(2030, 1, 1, tzinfo=UTC),
        )
        record = GrantRecord(grant, datetime(2026, 1, 1, tzinfo=UTC), "operator")
        value = encode_grant(CODEC, record)
        self.send(Topic.GRANTS, grant.grant_id, value, grant.grant_id)

    def run_state(self, run_id: str, status: str, observed_at: datetime, event_id: str) -> None:
        """A ``workflow.run.status`` event, as an upstream workflow engine of the tenant
        publishes it (the record carries its tenant)."""
        source_id = f"run:{run_id}"
        payload = {"tenant_id": TENANT, "run_id": run_id, "status": status}
        record = event_record(
            source_id, "workflow.run.status", event_id, payload, observed_at, tenant_id=TENANT
        )
        self.send(Topic.EVENTS, source_id, CODEC.encode("event", record), source_id)

    def ticker(
        self,
        clock: ManualClock,
        group: str,
        *,
        tools: Mapping[str, ToolConfig] | None = None,
        budgets: RedisBudgets | None = None,
        default_caps: BudgetCaps | None = None,
    ) -> PollTicker:
        settings = TickerSettings(
            self.bootstrap,
            self.topology,
            "t-1",
            group_id=group,
            poll_timeout_s=0.02,
            tools=tools or {},
            default_caps=default_caps,
        )
        deps = TickerDeps(budgets=budgets, clock=clock, metrics_registry=self.metrics_registry)
        ticker = PollTicker(settings, deps)
        ticker.start()
        return ticker

    def ticks(self) -> list[dict[str, Any]]:
        out = []
        for msg in read_all(self.bootstrap, self.name(Topic.TICKS)):
            record_type, value = CODEC.decode(msg.value() or b"")
            assert record_type == "tick"
            if value["sealed"] is not None:
                payload = tick_payload(value, self.ring)
                value["payload"] = canonical_json(payload).decode() if payload else None
            out.append(value)
        return out

    def ticks_of(self, watcher_id: str) -> list[datetime]:
        return [t["scheduled_at"] for t in self.ticks() if t["watcher_id"] == watcher_id]


def settle(ticker: PollTicker, until: Callable[[], bool] | None = None, max_s: float = 60) -> None:
    """Step until the ticker holds its partitions and ``until()`` holds (then 3 more steps)."""
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline:
        report = ticker.step()
        if ticker.app.assignment() and report.committed and (until is None or until()):
            for _ in range(3):
                ticker.step()
            return
    raise AssertionError("the ticker did not settle in time")


def polling_definition(watcher_id: str, run_id: str, missed: Any) -> WatcherDefinition:
    body = {
        "watcher_id": watcher_id,
        "purpose": "ops.alert",
        "source": {
            "kind": "polling",
            "source_id": f"run:{run_id}",
            "tool": "workflow.run.status@v1",
            "target": run_id,
            "cron": "* * * * *",
            "timezone": "UTC",
            "missed": missed,
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "ops-hook"},
        "expires_at": "2027-06-01T00:00:00Z",
    }
    return WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER).with_version(1)


def schedule_definition(name: str, cron: str) -> WatcherDefinition:
    body = {
        "watcher_id": f"schedule:me:{name}",
        "purpose": "schedule.chat",
        "source": {"kind": "schedule", "cron": cron, "timezone": "America/New_York"},
        "delivery": {"target": "me", "verb": "send", "text": name},
    }
    return WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER).with_version(1)


def walk(ticker: PollTicker, clock: ManualClock, start: datetime, end: datetime) -> None:
    """Move the clock in 10-minute steps (on the instants themselves), one tick step each."""
    clock.set(start)
    while clock.now() <= end:
        assert ticker.step().committed
        clock.advance(timedelta(minutes=10))


def agent_watch(watcher_id: str, run_id: str) -> WatcherDefinition:
    body = {
        "watcher_id": watcher_id,
        "purpose": "agent.watch",
        "mode": "once",
        "source": {
            "kind": "polling",
            "source_id": f"run:{run_id}",
            "tool": "workflow.run.status@v1",
            "target": run_id,
            "cadence": "1m",
            "max_age": "2m",
        },
        "condition": {"eq": ["status", "succeeded"]},
        "terminal_condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "in-app"},
        "window": "30m",
        "session_id": "s-1",
    }
    return WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER).with_version(1)


class Pipeline:
    """A ticker and a real evaluator, stepped in turn on one ManualClock; ``ticker_options``
    go to the ticker (``tools``, ``budgets``, ``default_caps`` for a polling tool)."""

    def __init__(
        self, deployment: Deployment, clock: ManualClock, redis_url: str, **ticker_options: Any
    ) -> None:
        import redis

        from consumers.evaluator.stage import EvaluatorDeps, EvaluatorSettings, EvaluatorStage
        from pipeline.redis.budgets import RedisBudgets
        from pipeline.rules.budgets import BudgetCaps
        from producers.ticker.tools import REGISTERED

        self.deployment = deployment
        group = deployment.topology.prefix + "ticker"
        self.ticker = deployment.ticker(clock, group, **ticker_options)
        registry = CollectorRegistry()
        budgets = RedisBudgets(
            redis.Redis.from_url(redis_url), key_prefix=f"test:{deployment.topology.prefix}"
        )
        settings = EvaluatorSettings(
            deployment.bootstrap,
            deployment.topology,
            "e-1",
            default_caps=BudgetCaps(window=timedelta(hours=1), evaluations=1000),
            evaluators=REGISTERED,
        )
        deps = EvaluatorDeps(budgets, clock=clock, metrics_registry=registry)
        self.evaluator = EvaluatorStage(settings, deps).app
        self.evaluator.start()
        self._consumed = {"group": settings.group, "topic": deployment.name(Topic.TICKS)}
        self._registry = registry

    def _evaluated_all_ticks(self) -> bool:
        """The evaluator has read every tick written so far (at the clock's current instant)."""
        written = sum(
            self.deployment.metrics_registry.get_sample_value(
                "vigil_ticker_due_instants_total", {"kind": kind}
            )
            or 0
            for kind in ("poll", "schedule", "expiry")
        )
        read = self._registry.get_sample_value(
            "vigil_runtime_records_consumed_total", self._consumed
        )
        return (read or 0) >= written

    def step(self, until: Callable[[], bool] = lambda: True, max_s: float = 60) -> None:
        """Step both until ``until()`` holds and the evaluator has caught up with the ticks."""
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline:
            self.ticker.step()
            self.evaluator.step(0.02)
            assigned = self.ticker.app.assignment() and self.evaluator.assignment()
            if assigned and self._evaluated_all_ticks() and until():
                return
        raise AssertionError("the pipeline did not get there in time")

    def run_status(self, run_id: str) -> str | None:
        state = self.ticker.states.latest("workflow.run.status", TENANT, run_id)
        return None if state is None else str(state.payload["status"])

    def close(self) -> None:
        self.ticker.close()
        self.evaluator.close()


def outbox(deployment: Deployment) -> list[dict[str, Any]]:
    values = []
    for msg in read_all(deployment.bootstrap, deployment.name(Topic.OUTBOX)):
        record_type, value = CODEC.decode(msg.value() or b"")
        assert record_type == "outbox_entry"
        opened = open_fields(
            deployment.ring, outbox_identity(value["delivery_key"]), value["sealed"]
        )
        assert opened is not None, "an outbox entry of a live watcher opens"
        value["trigger"] = canonical_json(opened["trigger"]).decode()
        value["text"], value["args"] = opened["text"], opened["args"]
        values.append(value)
    return values


def watcher_status(deployment: Deployment, watcher_id: str) -> str:
    """The status the evaluator's ``watcher-state`` holds for one watcher."""
    from pipeline.records.watcher_state import decode_state

    table = read_table(deployment.bootstrap, deployment.name(Topic.WATCHER_STATE))
    raw = table[watcher_key(TENANT, USER, watcher_id)]
    return decode_state(CODEC, raw).status.value


class TickerOnly:
    """The ticker alone, stepped on the ManualClock (decisions come from the pure evaluate)."""

    def __init__(self, deployment: Deployment, clock: ManualClock) -> None:
        self.ticker = deployment.ticker(clock, deployment.topology.prefix + "ticker")

    def step(self, until: Callable[[], bool] = lambda: True, max_s: float = 60) -> None:
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline:
            if self.ticker.step().committed and self.ticker.app.assignment() and until():
                return
        raise AssertionError("the ticker did not get there in time")

    def run_status(self, run_id: str) -> str | None:
        state = self.ticker.states.latest("workflow.run.status", TENANT, run_id)
        return None if state is None else str(state.payload["status"])

    def close(self) -> None:
        self.ticker.close()


class StatusServer:
    """A real local HTTP server answering GET with a JSON object (``answer()``, by default
    ``{"status":"down"}``); counts the calls."""

    def __init__(self, answer: Callable[[], dict[str, Any]] | None = None) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        server = self
        current = answer or (lambda: {"status": "down"})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.calls += 1
                body = canonical_json(current())
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.calls = 0
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/status.json"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def http_definition(watcher_id: str, source_id: str, **overrides: Any) -> WatcherDefinition:
    body = {
        "watcher_id": watcher_id,
        "purpose": "ops.alert",
        "source": {
            "kind": "polling",
            "source_id": source_id,
            "tool": "http.json@v1",
            "tool_ref": "status-page",
            "cron": "* * * * *",
            "timezone": "UTC",
            "missed": "latest",
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "down"]},
        "delivery": {"target": "ops-hook"},
        "expires_at": "2027-06-01T00:00:00Z",
        **overrides,
    }
    return WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER).with_version(1)
