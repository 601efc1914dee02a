"""End-to-end latency: from an event's ``observed_at`` to its webhook at a local HTTP receiver.

``python -m benchmarks.latency [--events-per-s 500] [--seconds 60] [--watchers 40]
[--satisfy-every 3]`` starts its own Apache Kafka broker and Redis (the project's deploy scripts,
on ports no test and no other benchmark uses, data in a temporary directory) and the vigil
processes of a deployment as real processes (command processor, evaluator, poll ticker,
delivery, each with its default commit interval), creates ``--watchers`` event watchers (one
source each) through the command processor, then publishes events at a steady rate for
``--seconds``: event *i* is due at ``i / rate`` seconds after the start, is stamped
``observed_at`` when it is handed to the producer, and satisfies its watcher when *i* is
divisible by ``--satisfy-every``. The receiver stamps each webhook on arrival (wall clock);
each delivery key is mapped back to its event, so the latency is arrival − ``observed_at``.

Prints one JSON object: p50/p95/p99/max in milliseconds over the deliveries of the steady part
(the first ``--warmup-s`` seconds' events are left out: group joins and first connections),
how many were published, expected and received, the achieved publish rate, and the commit
interval the processes ran under (goal: p99 ≤ 300 ms at 500 events/s with 100 ms).

``stages`` splits each delivery's latency in four, read back from what the processes wrote
(p50/p99 of each, milliseconds): ``evaluated`` (``observed_at`` → the evaluator produced its
outbox entry: the publisher's batching, the evaluator's fetch and batch), ``read_by_delivery``
(→ the delivery worker created its ``pending`` state, ``created_at``: the evaluator's commit
and the ``read_committed`` fetch), ``claimed`` (→ the claim was decided, the ``dispatching``
state's ``updated_at``: the due queue and the claim batch), ``received`` (→ arrival: the
claim's commit and the HTTP call). Record timestamps and ``created_at``/``updated_at`` come
from the processes' clocks on this one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from consumers.evaluator.stage import EvaluatorSettings
from pipeline.crypto import generate_kek_text
from pipeline.kafka.scan import scan
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.delivery_state import decode_record
from pipeline.rules.keys import EventTrigger, delivery_key
from pipeline.rules.outcomes import DeliveryStatus
from producers.publish.publisher import EventPublisher
from tests.chaos.load import EVENT_TYPE, Subject, event_watcher
from tests.chaos.servers import OwnKafka, OwnRedis, worker_ports
from tests.chaos.stack import SECRET, Stack
from tests.receiver import Receiver

__all__ = ["main"]


def _percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    index = min(len(sorted_ms) - 1, max(0, round(q * len(sorted_ms)) - 1))
    return round(sorted_ms[index], 1)


def _wall_of_monotonic() -> float:
    """``time.time() - time.monotonic()``, read where no preemption split the two reads (on a
    busy machine one read pair can be tens of ms apart, which shifted every arrival)."""
    best = (float("inf"), 0.0)
    for _ in range(100):
        before = time.monotonic()
        wall = time.time()
        after = time.monotonic()
        best = min(best, (after - before, wall - (before + after) / 2))
    return best[1]


def _publish(
    publisher: EventPublisher,
    watchers: list[tuple[str, str]],
    rate: float,
    seconds: float,
    satisfy_every: int,
) -> tuple[dict[int, datetime], float]:
    """Events at ``rate`` for ``seconds``; returns each one's ``observed_at`` and the seconds
    the publishing took."""
    observed: dict[int, datetime] = {}
    total = int(rate * seconds)
    started = time.monotonic()
    for i in range(total):
        due = started + i / rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)  # pacing: the producer serves its reports on its next call
        _, source = watchers[i % len(watchers)]
        status = "failed" if i % satisfy_every == 0 else "passed"
        now = datetime.now(UTC)
        publisher.publish(source, EVENT_TYPE, f"e-{i}", {"status": status, "n": i}, now)
        observed[i] = now
    publisher.flush(60)
    return observed, time.monotonic() - started


def run(args: argparse.Namespace, bootstrap: str, redis_url: str, root: Path) -> dict[str, Any]:
    with Receiver(secret=SECRET) as receiver:
        stack = Stack(root, bootstrap=bootstrap, redis_url=redis_url, receiver_url=receiver.url)
        try:
            stack.create_topics()
            stack.start_all()
            subject = Subject.fresh(stack, "latency")
            watchers = {f"l-{n}": f"lat.{n}" for n in range(args.watchers)}
            with subject.client(timeout_s=60) as client:
                subject.grant(client, watchers.values())
                for name, source in watchers.items():
                    subject.create(client, event_watcher(name, source))
            return _measure(args, stack, subject, receiver, list(watchers.items()))
        finally:
            stack.stop_all(timeout_s=60)


def _measure(
    args: argparse.Namespace,
    stack: Stack,
    subject: Subject,
    receiver: Receiver,
    watchers: list[tuple[str, str]],
) -> dict[str, Any]:
    publisher = EventPublisher(stack.bootstrap, stack.topology)
    wall_of_monotonic = _wall_of_monotonic()
    observed, took = _publish(
        publisher, watchers, args.events_per_s, args.seconds, args.satisfy_every
    )
    first = int(args.warmup_s * args.events_per_s)
    expected: dict[str, int] = {}
    for i in range(first, len(observed)):
        if i % args.satisfy_every:
            continue
        watcher_id, source = watchers[i % len(watchers)]
        key = delivery_key(
            tenant_id=subject.tenant,
            user_id=subject.user,
            watcher_id=watcher_id,
            watcher_version=1,
            source_id=source,
            trigger=EventTrigger(EVENT_TYPE, f"e-{i}"),
        )
        expected[key] = i
    deadline = time.monotonic() + args.settle_s
    arrived: dict[str, float] = {}
    seen = 0
    while time.monotonic() < deadline:
        requests = receiver.requests
        for request in requests[seen:]:
            got = request.idempotency_key
            if got is not None and got in expected and got not in arrived:
                arrived[got] = request.at + wall_of_monotonic
        seen = len(requests)
        if len(arrived) == len(expected):
            break
        time.sleep(0.2)
    latencies = sorted(
        (arrived[key] - observed[i].timestamp()) * 1000
        for key, i in expected.items()
        if key in arrived
    )
    return {
        "benchmark": "latency",
        "events_per_s": args.events_per_s,
        "achieved_events_per_s": round(len(observed) / took, 1),
        "seconds": args.seconds,
        "warmup_s": args.warmup_s,
        "watchers": args.watchers,
        "published": len(observed),
        "deliveries_expected": len(expected),
        "deliveries_received": len(arrived),
        "commit_interval_ms": EvaluatorSettings("", Topology("x."), "").commit_interval_ms,
        "p50_ms": _percentile(latencies, 0.50),
        "p95_ms": _percentile(latencies, 0.95),
        "p99_ms": _percentile(latencies, 0.99),
        "max_ms": round(latencies[-1], 1) if latencies else None,
        "mean_ms": round(statistics.fmean(latencies), 1) if latencies else None,
        "goal_p99_ms": 300,
        "stages": _stages(stack, expected, observed, arrived),
    }


_STAGES = ("evaluated", "read_by_delivery", "claimed", "received")


def _stages(
    stack: Stack,
    expected: dict[str, int],
    observed: dict[int, datetime],
    arrived: dict[str, float],
) -> dict[str, dict[str, float]]:
    """Per stage, p50 and p99 of its share of each delivery's latency (module docstring)."""
    written: dict[str, float] = {}  # delivery key -> the outbox entry's record timestamp (s)
    for msg in scan(stack.bootstrap, stack.topology.name(Topic.OUTBOX)):
        key = (msg.key() or b"").decode()
        if key in expected and key not in written:
            written[key] = msg.timestamp()[1] / 1000
    claimed: dict[str, tuple[float, float]] = {}  # key -> (pending created, claim decided)
    codec = default_codec()
    for msg in scan(stack.bootstrap, stack.topology.name(Topic.DELIVERY_STATE)):
        key = (msg.key() or b"").decode()
        value = msg.value()
        if key not in expected or key in claimed or value is None:
            continue
        state = decode_record(codec, value).state
        if state.status is DeliveryStatus.DISPATCHING and state.attempt == 1:
            claimed[key] = (state.created_at.timestamp(), state.updated_at.timestamp())
    spans: dict[str, list[float]] = {name: [] for name in _STAGES}
    for key, i in expected.items():
        if key not in arrived or key not in written or key not in claimed:
            continue
        marks = [observed[i].timestamp(), written[key], *claimed[key], arrived[key]]
        for name, start, end in zip(_STAGES, marks, marks[1:], strict=False):
            spans[name].append((end - start) * 1000)
    out: dict[str, dict[str, float]] = {}
    for name, values in spans.items():
        values.sort()
        out[name] = {"p50_ms": _percentile(values, 0.5), "p99_ms": _percentile(values, 0.99)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__)
    parser.add_argument("--events-per-s", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--watchers", type=int, default=40)
    parser.add_argument("--satisfy-every", type=int, default=3)
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--settle-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("VIGIL_MASTER_KEYS", generate_kek_text("latency"))
    kafka_port, controller, redis_port = worker_ports()
    with tempfile.TemporaryDirectory(prefix="vigil-latency-") as tmp:
        root = Path(tmp)
        kafka = OwnKafka(kafka_port, controller, root / "kafka")
        redis = OwnRedis(redis_port, root / "redis")
        try:
            print(kafka.start(), file=sys.stderr)
            print(redis.start(), file=sys.stderr)
            report = run(args, kafka.bootstrap, redis.url, root / "stack")
        finally:
            redis.stop()
            kafka.stop()
    print(json.dumps(report))
    return 0 if report["deliveries_received"] == report["deliveries_expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
