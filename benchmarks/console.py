"""Console page times with 10,000 watchers in one subject (goal: every page < 300 ms).

``python -m benchmarks.console [--watchers N] [--rounds R]`` prints one JSON object: for each
console page — the watches list (first page, a late page, filtered by source and by state), a
watcher's page, proposals, schedules (one chat), deliveries (all, and dead letters only) — the
median, p95 and worst server time of R requests (the FastAPI app in process, through its
TestClient, signed in with a session cookie, against the real command processor on the real
broker), the same for a subject with 10 watchers in the same run (the baseline), and their
ratio.

The watchers are made through the command processor (operator ``create`` commands produced at
once, every result awaited; the subject's limit raised to N). Needs the broker of
``KAFKA_BOOTSTRAP_SERVERS`` (default 127.0.0.1:9092); its topics are deleted afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import statistics
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import TopicPartition
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from consumers.commands.loop import CommandDeps, CommandProcessor, CommandSettings
from pipeline.cli.api_cmd import build_services
from pipeline.config import parse_config
from pipeline.control.client import CommandClient, operator_principal
from pipeline.control.http.api import create_app
from pipeline.crypto import KeyEncryptionKeys, KeyRing, generate_kek_text
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.clients import Producer, table_consumer
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.command import encode_command
from pipeline.records.command_result import decode_result
from pipeline.rules.authz import Action
from pipeline.rules.commands import CommandVerb, GrantSpec
from pipeline.rules.commands.limits import Limits
from pipeline.rules.keys import subject_key
from pipeline.runtime.keys import read_keys

__all__ = ["main"]

TENANT = "bench"
BIG, SMALL = "u-big", "u-small"
SOURCES = tuple(f"src-{n}" for n in range(20))
PARTITIONS = 4
TOKEN = {BIG: "token-big-xxxxxxxx", SMALL: "token-small-xxxxxxx"}
WAVE = 50
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def definition(n: int) -> dict[str, Any]:
    return {
        "watcher_id": f"w-{n:05d}",
        "purpose": "ops.alert",
        "source": {
            "kind": "event",
            "source_id": SOURCES[n % len(SOURCES)],
            "event_type": "build.finished",
            "max_age": "10m",
        },
        "condition": {"all": [{"eq": ["status", "failed"]}, {"ge": ["n", n % 7]}]},
        "delivery": {"target": "hook"},
        "expires_at": "2030-01-01T00:00:00Z",
    }


def populate(bootstrap: str, topology: Topology, user: str, count: int, keks: Any) -> float:
    """``count`` watchers for ``user``, made through the command processor (the commands
    produced at once, every result awaited and checked); seconds taken."""
    codec = default_codec()
    until = datetime(2030, 1, 1, tzinfo=UTC)
    operator = operator_principal("bench", "root")
    started = time.perf_counter()
    with CommandClient(bootstrap, topology, timeout_s=120, keks=keks) as client:
        grant = GrantSpec(
            tenant_id=TENANT,
            user_id=user,
            purpose="ops.alert",
            sources=SOURCES,
            targets=("hook",),
            actions=(Action.MANAGE, Action.DELIVER, Action.EVALUATE),
            until=until,
        )
        done = client.send(
            client.command(CommandVerb.GRANT_ADD, operator, TENANT, user, grant=grant)
        )
        assert done.ok, done.error
        first = client.command(CommandVerb.CREATE, operator, TENANT, user, definition=definition(0))
        assert client.send(first).ok  # the subject's data key exists from here on
        ring = KeyRing(keks, codec)
        read_keys(bootstrap, topology, ring, [(TENANT, user)])
        commands = topology.name(Topic.COMMANDS)
        partition = partition_for(
            subject_key(TENANT, user), topology.partitions_for(Topic.COMMANDS)
        )
        producer = Producer(bootstrap)
        results = table_consumer(
            bootstrap, f"bench-{uuid.uuid4().hex[:6]}", **{"enable.partition.eof": False}
        )
        topic = topology.name(Topic.COMMAND_RESULTS)
        parts = topology.partitions_for(Topic.COMMAND_RESULTS)
        results.assign([TopicPartition(topic, p, 0) for p in range(parts)])
        try:
            for wave in range(1, count, WAVE):  # waves: a bounded backlog for the processor
                wanted: set[bytes] = set()
                for n in range(wave, min(count, wave + WAVE)):
                    cmd = client.command(
                        CommandVerb.CREATE, operator, TENANT, user, definition=definition(n)
                    )
                    wanted.add(cmd.request_id.encode())
                    value = encode_command(codec, ring, cmd)
                    producer.produce(commands, cmd.subject_key, value, partition)
                producer.flush(120, "commands")
                deadline = time.monotonic() + 600
                while wanted and time.monotonic() < deadline:
                    for msg in results.consume(1000, 0.2):
                        key = msg.key()
                        if msg.error() is None and key in wanted:
                            result = decode_result(codec, ring, msg.value() or b"")
                            assert result.ok, result.error
                            wanted.discard(key)
                assert not wanted, f"{len(wanted)} creates unanswered"
        finally:
            results.close()
            producer.close(10)
    return time.perf_counter() - started


def signed_in(app: Any, token: str) -> TestClient:
    client = TestClient(app, base_url="https://testserver", follow_redirects=False)
    form = client.get("/ui/sign-in").text
    found = _CSRF.search(form)
    assert found is not None
    done = client.post("/ui/sign-in", data={"token": token, "csrf": found.group(1)})
    assert done.status_code == 303, done.text
    return client


def timed(client: TestClient, path: str, rounds: int) -> dict[str, float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        answer = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 1),
        "max_ms": round(times[-1], 1),
    }


def pages(watchers: int) -> dict[str, str]:
    last = max(1, -(-watchers // 50))
    return {
        "watches": "/ui/watches",
        "watches_late_page": f"/ui/watches?page={max(1, last - 1)}",
        "watches_by_source": "/ui/watches?source=src-7",
        "watches_by_state": "/ui/watches?state=active&page=2",
        "watch": f"/ui/watches/w-{min(watchers - 1, 4321):05d}",
        "proposals": "/ui/proposals",
        "schedules": "/ui/schedules",
        "deliveries": "/ui/deliveries",
        "dead_letters": "/ui/deliveries?state=dead",
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.console")
    parser.add_argument("--watchers", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("VIGIL_MASTER_KEYS", generate_kek_text("bench"))
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    topology = Topology(f"bench-console-{uuid.uuid4().hex[:8]}.", PARTITIONS)
    admin = connect_admin(bootstrap)
    ensure_topics(admin, topology)
    keks = KeyEncryptionKeys.load()
    stop = threading.Event()
    settings = CommandSettings(
        bootstrap,
        topology,
        instance_id=f"bench-{uuid.uuid4().hex[:6]}",
        limits=Limits(watchers=args.watchers + 100),
        consumer_overrides={"fetch.wait.max.ms": 10},
    )
    processor = CommandProcessor(
        settings, CommandDeps(keks=keks, metrics_registry=CollectorRegistry())
    )
    thread = threading.Thread(target=processor.run, args=(stop,), daemon=True)
    thread.start()
    try:
        made = populate(bootstrap, topology, BIG, args.watchers, keks)
        populate(bootstrap, topology, SMALL, 10, keks)
        principals = {
            name: {
                "token_sha256": hashlib.sha256(TOKEN[name].encode()).hexdigest(),
                "role": "user",
                "tenant_id": TENANT,
                "user_id": name,
            }
            for name in (BIG, SMALL)
        }
        config = parse_config(
            {
                "kafka": {
                    "bootstrap_servers": bootstrap,
                    "topic_prefix": topology.prefix,
                    "partitions": PARTITIONS,
                },
                "principals": principals,
                "chats": {"me": {"kind": "console"}},
                "api": {
                    "rate": 100_000,
                    "burst": 1_000_000,
                    "sign_in_per_minute": 10_000,
                },  # measured, not limited
            }
        )
        services, close = build_services(config, pool_size=4, keks=keks)
        try:
            app = create_app(services)
            big, small = signed_in(app, TOKEN[BIG]), signed_in(app, TOKEN[SMALL])
            for path in pages(args.watchers).values():  # warm: caches, clients, connections
                big.get(path)
            result: dict[str, Any] = {}
            for name, path in pages(args.watchers).items():
                measured = timed(big, path, args.rounds)
                baseline = timed(small, pages(10)[name], args.rounds)
                measured["baseline_p50_ms"] = baseline["p50_ms"]
                measured["ratio_p50"] = round(measured["p50_ms"] / max(baseline["p50_ms"], 0.1), 2)
                result[name] = measured
        finally:
            close()
        worst = max(v["p95_ms"] for v in result.values())
        print(
            json.dumps(
                {
                    "benchmark": "console",
                    "watchers": args.watchers,
                    "rounds": args.rounds,
                    "populate_s": round(made, 1),
                    "pages": result,
                    "worst_p95_ms": worst,
                    "goal_ms": 300,
                    "meets_goal": worst < 300,
                    "python": platform.python_version(),
                },
                indent=2,
            )
        )
    finally:
        stop.set()
        thread.join(60)
        admin.delete_topics([topology.name(topic) for topic in Topic])


if __name__ == "__main__":
    main()
