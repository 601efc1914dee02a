"""A real-broker harness for the delivery consumer tests: topics, outbox entries, grants,
lifecycle records, a worker on a thread, and the delivery-state history read back.

Outbox entries are written directly with the evaluator's encoder
(``pipeline.records.outbox_entry.encode_outbox_entry``) at Java's partition for their key, as the
evaluator writes them — sealed under their subject's data key, which the harness writes to
``keys`` first as the command processor would; grants and lifecycle records with the shipped
Avro schemas. The worker and its adapters get a ring of their own (:attr:`Harness.worker_ring`),
filled only from the ``keys`` topic.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from confluent_kafka import Message, Producer
from prometheus_client import CollectorRegistry

from consumers.delivery.adapters import AdapterRegistry, build_adapters
from consumers.delivery.loop import DeliveryDeps, DeliverySettings, DeliveryWorker
from consumers.delivery.sends import Executor
from pipeline.clock import Clock, SystemClock
from pipeline.config import parse_config
from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.clients import producer_config
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.delivery_state import DeliveryRecord, decode_record
from pipeline.records.outbox_entry import encode_outbox_entry
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.backoff import RetryPolicy
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.data_keys import KeyOwner, subject_owner
from pipeline.rules.keys import subject_key, watcher_key
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import Outcome
from pipeline.rules.quiet_hours import QuietHours
from tests.integration.runtime_helpers import read_all
from tests.receiver import Receiver

__all__ = ["BOT_TOKEN", "SECRET", "SECRET_ENV", "Harness", "poll_until", "test_key"]

SECRET = "whsec_" + "dGVzdC1zZWNyZXQtZm9yLXZpZ2lsLWRlbGl2ZXJ5"  # base64 of a test key
SECRET_ENV = "VIGIL_TEST_HOOK_SECRET"
BOT_TOKEN = "123:test-bot-token"
BOT_TOKEN_ENV = "VIGIL_TEST_BOT_TOKEN"
PURPOSE = "ops.alert"
SOURCE = "ci.pipeline"
FAR = datetime(2099, 1, 1, tzinfo=UTC)


def test_key(text: str) -> str:
    """A delivery key: 64 lowercase hex characters."""
    return hashlib.sha256(text.encode()).hexdigest()


test_key.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def poll_until(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Call ``check`` until it returns something truthy (returned), or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@dataclass
class Harness:
    bootstrap: str
    redis_url: str
    topology: Topology
    receiver: Receiver
    name: str
    codec: Any = field(default_factory=default_codec)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    _producer: Producer | None = None
    ring: KeyRing = field(
        default_factory=lambda: KeyRing(KeyEncryptionKeys.load(), default_codec())
    )
    worker_ring: KeyRing = field(
        default_factory=lambda: KeyRing(KeyEncryptionKeys.load(), default_codec())
    )

    @classmethod
    def create(
        cls, bootstrap: str, redis_url: str, name: str, receiver: Receiver, partitions: int = 2
    ) -> Harness:
        topology = Topology(prefix=f"{name}.", partitions=partitions, replication_factor=1)
        ensure_topics(connect_admin(bootstrap), topology)
        return cls(bootstrap, redis_url, topology, receiver, name)

    # -- writing inputs ------------------------------------------------------------------

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(producer_config(self.bootstrap))
        return self._producer

    def produce(self, topic: Topic, key: str, value: bytes | None) -> None:
        name = self.topology.name(topic)
        partition = partition_for(key, self.topology.partitions_for(topic))
        while True:
            try:
                self.producer.produce(name, value, key, partition)
                return
            except BufferError:
                self.producer.poll(0.1)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0

    def entry(
        self,
        label: str,
        *,
        tenant: str = "acme",
        user: str = "u-1",
        watcher: str = "w-1",
        target: str = "hook",
        retry: tuple[int, timedelta, timedelta] = (8, timedelta(milliseconds=50), timedelta(1)),
        budgets: BudgetCaps | None = None,
        quiet_hours: QuietHours | None = None,
        due_at: datetime | None = None,
        created_at: datetime | None = None,
        retention: timedelta = timedelta(days=1),
        wake_session: bool = False,
        verb: str = "notify",
        text: str | None = None,
        args: tuple[str, ...] | None = None,
        purpose: str = PURPOSE,
    ) -> OutboxEntry:
        now = datetime.now(UTC)
        return OutboxEntry(
            delivery_key=test_key(f"{self.name}:{label}"),
            tenant_id=tenant,
            user_id=user,
            watcher_id=watcher,
            watcher_version=1,
            source_id=SOURCE,
            purpose=purpose,
            trigger={"kind": "event", "event_type": "build.finished", "event_id": label},
            outcome=Outcome.SATISFIED,
            verb=verb,
            target=target,
            text=text,
            args=args,
            evidence_digest=test_key(f"evidence:{label}"),
            evidence_observed_at=created_at or now,
            due_at=due_at or now,
            created_at=created_at or now,
            retry=RetryPolicy(max_attempts=retry[0], base=retry[1], cap=retry[2]),
            quiet_hours=quiet_hours,
            budgets=budgets,
            delivery_retention=retention,
            wake_session=wake_session,
            session_id="s-1" if wake_session else None,
        )

    def key(self, owner: KeyOwner) -> None:
        """``owner``'s data key in ``keys``, made once (as the command processor does)."""
        if self.ring.record(owner) is None:
            topic_key, raw = self.ring.create(owner, datetime.now(UTC))
            self.produce_at(Topic.KEYS, topic_key, raw, owner.subject_key)

    def shred(self, owner: KeyOwner) -> None:
        """Tombstone ``owner``'s data key (what erasure does first)."""
        self.ring.apply(owner.topic_key, None)
        self.produce_at(Topic.KEYS, owner.topic_key, None, owner.subject_key)
        self.flush()

    def produce_at(self, topic: Topic, key: str, value: bytes | None, placed_by: str) -> None:
        name = self.topology.name(topic)
        partition = partition_for(placed_by, self.topology.partitions_for(topic))
        self.producer.produce(name, value, key, partition)

    def publish(self, entries: Iterable[OutboxEntry]) -> list[OutboxEntry]:
        published = list(entries)
        for entry in published:
            self.key(subject_owner(entry.tenant_id, entry.user_id))
            value = encode_outbox_entry(self.codec, self.ring, entry)
            self.produce(Topic.OUTBOX, entry.delivery_key, value)
        self.flush()
        return published

    def grant(
        self,
        grant_id: str,
        *,
        tenant: str = "acme",
        user: str = "u-1",
        targets: Iterable[str] = ("hook", "inbox", "me"),
        until: datetime = FAR,
        purpose: str = PURPOSE,
    ) -> None:
        value = self.codec.encode(
            "grant",
            {
                "grant_id": grant_id,
                "tenant_id": tenant,
                "user_id": user,
                "purpose": purpose,
                "sources": [SOURCE],
                "tools": [],
                "targets": list(targets),
                "actions": ["deliver"],
                "until": until,
                "created_at": datetime.now(UTC),
                "created_by": "test",
            },
        )
        self.produce(Topic.GRANTS, grant_id, value)
        self.flush()

    def revoke(self, grant_id: str) -> None:
        self.produce(Topic.GRANTS, grant_id, None)
        self.flush()

    def cancel_watcher(self, tenant: str, user: str, watcher: str, version: int = 1) -> None:
        value = self.codec.encode(
            "lifecycle",
            {
                "scope": "watcher",
                "tenant_id": tenant,
                "user_id": user,
                "watcher_id": watcher,
                "version": version,
                "revision": 2,
                "status": "cancelled",
                "reason": "cancelled",
                "at": datetime.now(UTC),
            },
        )
        self.produce(Topic.LIFECYCLE, watcher_key(tenant, user, watcher), value)
        self.flush()

    def erase_subject(self, tenant: str, user: str) -> None:
        value = self.codec.encode(
            "lifecycle",
            {
                "scope": "subject",
                "tenant_id": tenant,
                "user_id": user,
                "status": "erased",
                "at": datetime.now(UTC),
            },
        )
        self.produce(Topic.LIFECYCLE, subject_key(tenant, user), value)
        self.flush()

    # -- reading outputs -----------------------------------------------------------------

    def history(self) -> dict[str, list[DeliveryRecord | None]]:
        """Every committed delivery-state record per key, in order (None: a tombstone)."""
        out: dict[str, list[DeliveryRecord | None]] = {}
        for msg in read_all(self.bootstrap, self.topology.name(Topic.DELIVERY_STATE), 20):
            value = msg.value()
            record = None if value is None else decode_record(self.codec, value)
            out.setdefault((msg.key() or b"").decode(), []).append(record)
        return out

    def latest(self) -> dict[str, DeliveryRecord | None]:
        return {key: records[-1] for key, records in self.history().items()}

    def read(self, topic: Topic) -> list[Message]:
        return read_all(self.bootstrap, self.topology.name(topic), 20)

    # -- the worker ----------------------------------------------------------------------

    def adapters(self) -> AdapterRegistry:
        config = parse_config(
            {
                "kafka": {
                    "bootstrap_servers": self.bootstrap,
                    "topic_prefix": self.topology.prefix,
                    "partitions": self.topology.partitions,
                },
                "chats": {
                    "me": {
                        "kind": "telegram",
                        "api_base": self.receiver.url,
                        "token_env": BOT_TOKEN_ENV,
                        "chat_id": 42,
                    }
                },
                "destinations": {
                    "inbox": {"kind": "in_app"},
                    "hook": {
                        "kind": "webhook",
                        "url": self.receiver.hook_url,
                        "secret_env": SECRET_ENV,
                        "timeout": "2s",
                    },
                },
            }
        )
        return build_adapters(
            config, environ={SECRET_ENV: SECRET, BOT_TOKEN_ENV: BOT_TOKEN}, sealer=self.worker_ring
        )

    def budgets(self) -> RedisBudgets:
        client = redis.Redis.from_url(self.redis_url, socket_timeout=2, socket_connect_timeout=2)
        return RedisBudgets(client, key_prefix=f"{self.name}:budget:")

    def worker(
        self,
        adapters: AdapterRegistry,
        *,
        clock: Clock | None = None,
        instance: str = "i-1",
        budget_defaults: BudgetCaps | None = None,
        consumer_overrides: dict[str, object] | None = None,
        executor: Executor | None = None,
        **settings: Any,
    ) -> DeliveryWorker:
        return DeliveryWorker(
            DeliverySettings(
                bootstrap=self.bootstrap,
                topology=self.topology,
                instance_id=instance,
                group_id=f"{self.name}.delivery",
                budget_defaults=budget_defaults or BudgetCaps(window=timedelta(hours=1)),
                table_refresh_s=0.1,
                consumer_overrides={
                    "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": 500,
                    **(consumer_overrides or {}),
                },
                **settings,
            ),
            DeliveryDeps(
                adapters,
                self.budgets(),
                self.worker_ring,
                executor,
                clock=clock or SystemClock(),
                metrics_registry=self.registry,
            ),
        )

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the last worker's metrics (0 when never observed)."""
        return self.registry.get_sample_value(name, labels) or 0.0

    @contextmanager
    def running(self, worker: DeliveryWorker) -> Iterator[DeliveryWorker]:
        """Run ``worker`` on a thread; stop it gracefully (and re-raise its failure) after."""
        stop = threading.Event()
        failure: list[BaseException] = []

        def target() -> None:
            try:
                worker.run(stop)
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=target, name="delivery-worker", daemon=True)
        thread.start()
        try:
            yield worker
        finally:
            stop.set()
            thread.join(60)
        assert not thread.is_alive(), "the worker did not stop"
        if failure:
            raise failure[0]
