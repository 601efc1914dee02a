"""The whole pipeline on one real broker and Redis, for the erasure tests: the command
processor, the evaluator, the poll ticker and a delivery worker, each on its own thread and all
on one :class:`ManualClock`, behind one operator's :class:`CommandClient`.

Destinations: ``inbox`` (the in-app ledger), ``hook`` (a webhook on the receiver, which the
erasure tests have answer 410, so whatever goes there is dead-lettered at once), the console chat
``me`` (the immediate ``send``s, into :attr:`Stack.console`) and the Telegram-shaped chat
``phone`` on the receiver (accepted when it knows :data:`BOT_TOKEN`). The governed tool
``status-page`` is a local HTTP server (``ticker_helpers.StatusServer``) answering what
:attr:`Stack.tool_answer` holds. Everything reads as the real processes do: nothing is faked.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import redis
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from consumers.commands.loop import CommandDeps, CommandProcessor, CommandSettings
from consumers.delivery.adapters import build_adapters
from consumers.delivery.loop import DeliveryDeps, DeliverySettings, DeliveryWorker
from consumers.evaluator.stage import EvaluatorDeps, EvaluatorSettings, EvaluatorStage
from pipeline.clock import ManualClock
from pipeline.config import ToolConfig, parse_config
from pipeline.control.client import CommandClient, operator_principal
from pipeline.control.http.backend import LedgerStore
from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.clients import producer_config
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.scan import Bound
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.ops.replay_reader import Scope, read_history
from pipeline.records.event import event_record
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.authz import Action
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.commands import CommandResult, CommandVerb, GrantSpec
from pipeline.rules.keys import subject_key
from pipeline.rules.replay_model import History
from pipeline.runtime.keys import read_keys
from producers.ticker.loop import PollTicker, TickerDeps, TickerSettings
from producers.ticker.tools import REGISTERED
from tests.integration.ticker_helpers import StatusServer
from tests.names import fresh
from tests.receiver import Receiver

__all__ = ["BOT_TOKEN", "Stack", "same_partition_user"]

PARTITIONS = 2
BOT_TOKEN = "777:stack-bot-token"
_BOT_TOKEN_ENV = "VIGIL_STACK_BOT_TOKEN"
T = TypeVar("T")
FAST_GROUP: dict[str, object] = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


def same_partition_user(tenant: str, user: str, prefix: str) -> str:
    """Another user whose subject key lands on ``user``'s partition (commands, keys, ledger)."""
    home = partition_for(subject_key(tenant, user), PARTITIONS)
    for n in range(1000):
        other = f"{prefix}-{n}"
        if partition_for(subject_key(tenant, other), PARTITIONS) == home:
            return other
    raise AssertionError("no user on the same partition")


class _Threads:
    """Loops on threads that stop together; a loop's failure is raised on close."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.failures: list[BaseException] = []

    def start(self, name: str, loop: Callable[[threading.Event], None]) -> None:
        def target() -> None:
            try:
                loop(self.stop)
            except BaseException as exc:
                self.failures.append(exc)

        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        assert not [t.name for t in self.threads if t.is_alive()], "a loop did not stop"
        assert not self.failures, self.failures


class Stack:
    """Every vigil process of one deployment, on threads, and the ways to look at it."""

    def __init__(
        self, bootstrap: str, redis_url: str, receiver: Receiver, name: str = "erase"
    ) -> None:
        self.bootstrap = bootstrap
        self.topology = Topology(fresh(f"t-{name}") + ".", PARTITIONS)
        ensure_topics(connect_admin(bootstrap), self.topology)
        self.clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
        self.tool_answer: dict[str, Any] = {"state": "quiet"}
        self.console = io.StringIO()
        self.receiver = receiver
        self._exit = ExitStack()
        self._threads = _Threads()
        self.tool = StatusServer(lambda: self.tool_answer)
        self._exit.callback(self.tool.close)
        self.keks = KeyEncryptionKeys.load()
        prefix = self.topology.prefix
        self._redis = redis.Redis.from_url(redis_url)
        self.budgets: Callable[[], RedisBudgets] = lambda: RedisBudgets(
            self._redis, key_prefix=f"{prefix}budget:"
        )
        self._start(redis_url)
        self.client = CommandClient(bootstrap, self.topology, timeout_s=60, keks=self.keks)
        self._exit.callback(self.client.close)
        self.ledger = LedgerStore(bootstrap, self.topology, self.clock, keks=self.keks)
        self._exit.callback(self.ledger.close)
        self.producer = Producer(producer_config(bootstrap))

    # -- the processes -------------------------------------------------------------------

    def _start(self, redis_url: str) -> None:
        topology, bootstrap, clock = self.topology, self.bootstrap, self.clock
        processor = CommandProcessor(
            CommandSettings(bootstrap, topology, "p", consumer_overrides=FAST_GROUP),
            CommandDeps(keks=self.keks, clock=clock, metrics_registry=CollectorRegistry()),
        )
        self._threads.start("command-processor", processor.run)
        settings = EvaluatorSettings(
            bootstrap,
            topology,
            "e",
            consumer_overrides=FAST_GROUP,
            default_caps=BudgetCaps(window=timedelta(hours=1), evaluations=1000, deliveries=1000),
            evaluators=REGISTERED,
        )
        deps = EvaluatorDeps(
            self.budgets(), keks=self.keks, clock=clock, metrics_registry=CollectorRegistry()
        )
        stage = EvaluatorStage(settings, deps)
        self._threads.start("evaluator", stage.run)
        ticker = PollTicker(
            TickerSettings(
                bootstrap,
                topology,
                "t",
                consumer_overrides=FAST_GROUP,
                tools={"status-page": ToolConfig(kind="http.json@v1", url=self.tool.url)},
                default_caps=BudgetCaps(window=timedelta(hours=1), evaluations=1000),
            ),
            TickerDeps(
                budgets=self.budgets(),
                keks=self.keks,
                clock=clock,
                metrics_registry=CollectorRegistry(),
            ),
        )
        self._threads.start("ticker", ticker.run)
        ring = KeyRing(self.keks, default_codec())
        config = parse_config(
            {
                "kafka": {
                    "bootstrap_servers": bootstrap,
                    "topic_prefix": topology.prefix,
                    "partitions": PARTITIONS,
                },
                "chats": {
                    "me": {"kind": "console"},
                    "phone": {
                        "kind": "telegram",
                        "api_base": self.receiver.url,
                        "token_env": _BOT_TOKEN_ENV,
                        "chat_id": 42,
                    },
                },
                "destinations": {
                    "inbox": {"kind": "in_app"},
                    "hook": {
                        "kind": "webhook",
                        "url": self.receiver.hook_url,
                        "timeout": "2s",
                        "unsigned": True,
                    },
                },
            }
        )
        adapters = self._exit.enter_context(
            build_adapters(
                config,
                environ={_BOT_TOKEN_ENV: BOT_TOKEN},
                stdout=self.console,
                clock=clock,
                sealer=ring,
            )
        )
        worker = DeliveryWorker(
            DeliverySettings(
                bootstrap=bootstrap,
                topology=topology,
                instance_id="d",
                group_id=f"{topology.prefix}delivery",
                table_refresh_s=0.1,
                consumer_overrides=FAST_GROUP,
            ),
            DeliveryDeps(
                adapters, self.budgets(), ring, clock=clock, metrics_registry=CollectorRegistry()
            ),
        )
        self._threads.start("delivery", worker.run)

    def close(self) -> None:
        try:
            self._threads.close()
        finally:
            self._exit.close()
            self.producer.flush(10)

    # -- commands, as an operator --------------------------------------------------------

    def send(self, verb: CommandVerb, tenant: str, user: str, **fields: Any) -> CommandResult:
        principal = operator_principal("ops", "root")
        return self.client.send(self.client.command(verb, principal, tenant, user, **fields))

    def ok(self, verb: CommandVerb, tenant: str, user: str, **fields: Any) -> dict[str, Any]:
        result = self.send(verb, tenant, user, **fields)
        assert result.ok and result.result is not None, result.error
        return result.result

    def grants(self, tenant: str, user: str) -> None:
        """What a subject's watchers and sends need: ops sources and the control chat."""
        until = datetime(2030, 1, 1, tzinfo=UTC)
        actions = (Action.EVALUATE, Action.DELIVER, Action.MANAGE)
        for purpose, sources, tools, targets in (
            ("ops.alert", ("shared.src", "poll.src"), ("status-page",), ("inbox", "hook")),
            ("control.chat", ("control", "schedule:me"), (), ("me", "inbox", "hook")),
        ):
            spec = GrantSpec(
                tenant_id=tenant,
                user_id=user,
                purpose=purpose,
                sources=sources,
                tools=tools,
                targets=targets,
                actions=actions,
                until=until,
            )
            self.ok(CommandVerb.GRANT_ADD, tenant, user, grant=spec)

    # -- inputs --------------------------------------------------------------------------

    def publish(
        self,
        source_id: str,
        event_type: str,
        event_id: str,
        payload: dict[str, Any],
        *,
        tenant_id: str | None = None,
    ) -> None:
        """One event, as a publisher of ``tenant_id`` (None: one that names no tenant)."""
        record = event_record(
            source_id, event_type, event_id, payload, self.clock.now(), tenant_id=tenant_id
        )
        value = default_codec().encode("event", record)
        partition = partition_for(source_id, PARTITIONS)
        self.producer.produce(self.topology.name(Topic.EVENTS), value, source_id, partition)
        assert self.producer.flush(30) == 0

    # -- looking -------------------------------------------------------------------------

    def ring(self, *subjects: tuple[str, str]) -> KeyRing:
        """The data keys ``keys`` holds now (of ``subjects``, or all)."""
        ring = KeyRing(self.keks, default_codec())
        read_keys(self.bootstrap, self.topology, ring, list(subjects) or None)
        return ring

    def history(self, tenant: str, user: str) -> History:
        """What ``vigil replay`` reads for one subject, from the start to now."""
        scope = Scope(tenant, user)
        return read_history(
            self.bootstrap, self.topology, Bound(), Bound(latest=True), scope,
            read_at=self.clock.now(), keks=self.keks,
        )  # fmt: skip

    def wait(self, what: str, check: Callable[[], T | None], seconds: float = 90) -> T:
        """What ``check`` first returns truthy, polled until ``seconds`` pass."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}")
