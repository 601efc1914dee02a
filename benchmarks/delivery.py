"""Delivery throughput: the delivery consumer vs. a bare httpx client, same receiver, same run.

``python -m benchmarks.delivery [--entries N] [--senders S]`` prints one JSON object:
deliveries/s of a :class:`~consumers.delivery.loop.DeliveryWorker` (outbox entries already in Kafka,
read, decided, budgeted in Redis, claimed in a transaction, POSTed signed with their
idempotency key by S sender threads, results recorded in the next transaction) and posts/s of
a bare ``httpx.Client`` on S threads POSTing the same bodies to the same receiver, and their
ratio (goal >= 0.5).

The receiver (``tests.receiver``) runs in its own process so that neither side shares a GIL
with it. The worker joins its group first; the clock starts when the entries are produced to
the outbox and stops when the receiver holds every key, so the delivery number includes
reading the outbox and both transactions. Needs the broker and Redis of
``KAFKA_BOOTSTRAP_SERVERS`` / ``REDIS_URL`` (default 127.0.0.1:9092 / 6379); its topics are
deleted afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import redis
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from consumers.delivery.adapters import build_adapters, webhook_body
from consumers.delivery.loop import DeliveryDeps, DeliverySettings, DeliveryWorker
from pipeline.config import parse_config
from pipeline.crypto import KeyEncryptionKeys, KeyRing, generate_kek_text
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.clients import producer_config
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.outbox_entry import encode_outbox_entry
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.backoff import RetryPolicy
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import Outcome

__all__ = ["main"]

_RECEIVER = """
import sys
from tests.receiver import Receiver
with Receiver() as receiver:
    print(receiver.port, flush=True)
    mark = 0
    for line in sys.stdin:
        if line.strip() == "mark":
            mark = len(receiver.requests)
        requests = receiver.requests[mark:]
        print(len(requests), len({r.idempotency_key for r in requests}), flush=True)
"""


class _ReceiverProcess:
    """``tests.receiver`` in a child process, asked for counts over a line protocol."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _RECEIVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        assert self._proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self._proc.stdout.readline())}/hook"

    def counts(self, command: str = "count") -> tuple[int, int]:
        """(requests, distinct idempotency keys) so far."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        total, distinct = self._proc.stdout.readline().split()
        return int(total), int(distinct)

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(10)


def _entries(run: str, n: int) -> list[OutboxEntry]:
    now = datetime.now(UTC)
    return [
        OutboxEntry(
            delivery_key=hashlib.sha256(f"{run}:{i}".encode()).hexdigest(),
            tenant_id=run,
            user_id="bench",
            watcher_id="w-bench",
            watcher_version=1,
            source_id="bench.source",
            purpose="bench",
            trigger={"kind": "event", "event_type": "bench", "event_id": str(i)},
            outcome=Outcome.SATISFIED,
            verb="notify",
            target="hook",
            evidence_digest="0" * 64,
            evidence_observed_at=now,
            due_at=now,
            created_at=now,
            retry=RetryPolicy(max_attempts=8, base=timedelta(seconds=1), cap=timedelta(minutes=1)),
            delivery_retention=timedelta(days=1),
        )
        for i in range(n)
    ]


def _grant(producer: Producer, topology: Topology, run: str) -> None:
    value = default_codec().encode(
        "grant",
        {
            "grant_id": f"g-{run}",
            "tenant_id": run,
            "user_id": "bench",
            "purpose": "bench",
            "sources": ["bench.source"],
            "targets": ["hook"],
            "actions": ["deliver"],
            "until": datetime(2099, 1, 1, tzinfo=UTC),
            "created_at": datetime.now(UTC),
            "created_by": "benchmark",
        },
    )
    topic = topology.name(Topic.GRANTS)
    producer.produce(topic, value, f"g-{run}", partition_for(f"g-{run}", topology.partitions))
    producer.flush(30)


def _wait(receiver: _ReceiverProcess, n: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while receiver.counts()[1] < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {receiver.counts()} of {n}")
        time.sleep(0.02)
    return time.monotonic()


def _bare(url: str, bodies: list[tuple[str, bytes]], senders: int) -> float:
    """Seconds for a bare httpx client on ``senders`` threads to POST every body once."""
    client = httpx.Client(limits=httpx.Limits(max_connections=64), trust_env=False)

    def post(item: tuple[str, bytes]) -> int:
        key, body = item
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        for _ in range(5):  # the receiver's small listen backlog can reset a burst of connects
            try:
                return client.post(url, content=body, headers=headers).status_code
            except httpx.TransportError:
                continue
        raise SystemExit(f"bare httpx: {key} failed five times")

    started = time.monotonic()
    with ThreadPoolExecutor(senders) as pool:
        statuses = list(pool.map(post, bodies))
    elapsed = time.monotonic() - started
    client.close()
    assert all(s == 200 for s in statuses)
    return elapsed


def _delivery(
    bootstrap: str,
    redis_url: str,
    topology: Topology,
    run: str,
    entries: list[OutboxEntry],
    receiver: _ReceiverProcess,
    senders: int,
    max_in_flight: int,
) -> tuple[float, dict[str, Any]]:
    config = parse_config(
        {"destinations": {"hook": {"kind": "webhook", "url": receiver.url, "unsigned": True}}}
    )
    producer = Producer(producer_config(bootstrap))
    _grant(producer, topology, run)
    client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    caps = BudgetCaps(window=timedelta(hours=1), deliveries=10**9, attempts=10**9)
    settings = DeliverySettings(
        bootstrap=bootstrap,
        topology=topology,
        instance_id="bench",
        group_id=f"{run}.delivery",
        budget_defaults=caps,
        senders=senders,
        max_in_flight=max_in_flight,
    )
    keks = KeyEncryptionKeys.load()
    writer = KeyRing(keks, default_codec())  # the evaluator's side: seals the entries
    for owner in {subject_owner(e.tenant_id, e.user_id) for e in entries}:
        topic_key, raw = writer.create(owner, datetime.now(UTC))
        place = partition_for(owner.subject_key, topology.partitions)
        producer.produce(topology.name(Topic.KEYS), raw, topic_key, place)
    producer.flush(30)
    with build_adapters(config) as adapters:
        budgets = RedisBudgets(client, key_prefix=f"bench:{run}:")
        ring = KeyRing(keks, default_codec())
        deps = DeliveryDeps(adapters, budgets, ring, metrics_registry=CollectorRegistry())
        worker = DeliveryWorker(settings, deps)
        stop = threading.Event()
        worker.start()
        while not worker.app.assignment():
            worker.step()
        thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
        thread.start()
        codec = default_codec()
        outbox = topology.name(Topic.OUTBOX)
        started = time.monotonic()
        for entry in entries:
            key = entry.delivery_key
            value = encode_outbox_entry(codec, writer, entry)
            while True:
                try:
                    producer.produce(outbox, value, key, partition_for(key, topology.partitions))
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush(30)
        finished = _wait(receiver, len(entries), timeout=120)
        stop.set()
        thread.join(60)
    client.close()
    total, distinct = receiver.counts()
    return finished - started, {"requests": total, "distinct_keys": distinct}


def main() -> None:
    os.environ.setdefault("VIGIL_MASTER_KEYS", generate_kek_text("bench"))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=3000)
    parser.add_argument("--senders", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--max-in-flight", type=int, default=256)
    args = parser.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    run = f"bench-delivery-{uuid.uuid4().hex[:8]}"
    topology = Topology(prefix=f"{run}.", partitions=args.partitions, replication_factor=1)
    admin = connect_admin(bootstrap)
    ensure_topics(admin, topology)
    entries = _entries(run, args.entries)
    bodies = [(e.delivery_key, webhook_body(e)) for e in entries]
    receiver = _ReceiverProcess()
    try:
        bare_s = _bare(receiver.url, bodies, args.senders)
        receiver.counts("mark")  # from here on, count only what delivery sends
        delivery_s, seen = _delivery(
            bootstrap, redis_url, topology, run, entries, receiver, args.senders, args.max_in_flight
        )
    finally:
        receiver.close()
        admin.delete_topics([topology.name(topic) for topic in Topic])
    delivery_rate = args.entries / delivery_s
    bare_rate = args.entries / bare_s
    print(
        json.dumps(
            {
                "benchmark": "delivery",
                "entries": args.entries,
                "senders": args.senders,
                "max_in_flight": args.max_in_flight,
                "partitions": args.partitions,
                "delivery_per_s": round(delivery_rate, 1),
                "bare_httpx_per_s": round(bare_rate, 1),
                "ratio": round(delivery_rate / bare_rate, 3),
                "delivery_seconds": round(delivery_s, 3),
                "bare_httpx_seconds": round(bare_s, 3),
                **seen,
            }
        )
    )


if __name__ == "__main__":
    main()
