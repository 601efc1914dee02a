"""The whole stack for a long run at a steady mixed load: slow leaks, stuck states, lost or
repeated deliveries.

``python -m benchmarks.soak [--minutes 20] [--warmup-minutes 3] [--events-per-s 20]
[--event-watchers 40] [--pollers 40] [--schedules 5] [--fail-every 10]`` starts its own Apache
Kafka broker and Redis (the project's deploy scripts, on ports no test uses, data in a temporary
directory), every vigil process as a real process (command processor, evaluator, poll ticker,
delivery), and a real local receiver that answers 500 to every ``--fail-every``-th request
(10%: retries with backoff). For ``--minutes`` it keeps a steady mixed load: events at a fixed
rate (every third satisfies its watcher), polling watchers on a one-minute cron (a governed
``http.json@v1`` tool at the receiver), and cron schedules sending to a Telegram-shaped chat;
settled deliveries are purged after a few minutes, as a busy deployment would configure it.

Every minute it prints one line per process — RSS and open file descriptors — and the consumer
lag of each group (to stderr). When the time is up the load stops (pollers and schedules
expire), everything settles, and the fault suite's checker (``tests.chaos.checker``) judges
the run. One JSON object goes to stdout: per process ``rss_mib`` at the end of the warm-up and
at the end, ``rss_growth_after_warmup`` (goal < 0.10), open fds, the lag at the end, ``lost``,
``duplicates`` and the checker's whole verdict. CI runs a three-minute version
(``tests/chaos/test_soak.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipeline.crypto import generate_kek_text
from pipeline.crypto.kek import DEFAULT_ENV
from pipeline.kafka.topics import Topic, Topology
from pipeline.rules.instants import parse_instant
from tests.chaos.checker import Checker, Expectation, TickPlan, Verdict
from tests.chaos.load import (
    EventLoad,
    Subject,
    event_watcher,
    minutes_between,
    poll_key,
    polling_watcher,
    schedule_watcher,
)
from tests.chaos.servers import OwnKafka, OwnRedis, worker_ports
from tests.chaos.stack import BOT_TOKEN, CHAT, PIPELINE, SECRET, Stack
from tests.receiver import Receiver

__all__ = ["SoakSettings", "main", "run"]

_MIB = 1024 * 1024
# Consumer groups and the inputs whose lag is printed.
_GROUPS = {
    "vigil.command-processor": (Topic.COMMANDS,),
    "vigil.evaluator": (Topic.EVENTS, Topic.TICKS),
    "vigil.ticker": (Topic.WATCHERS, Topic.EVENTS),
    "vigil.delivery": (Topic.OUTBOX,),
}
_RETENTION = "3m"  # settled deliveries purged after this: memory stays level
_MAX_AGE = "2m"  # delivery retention must be at least max age + 30 s


@dataclass(frozen=True, slots=True)
class SoakSettings:
    minutes: float = 20.0
    warmup_minutes: float = 3.0
    events_per_s: float = 20.0
    event_watchers: int = 40
    pollers: int = 40
    schedules: int = 5
    fail_every: int = 10
    sample_s: float = 60.0
    settle_s: float = 600.0


def group_lag(bootstrap: str, topology: Topology) -> dict[str, int]:
    """Records each group has not committed yet, summed over its inputs (markers count too)."""
    lag: dict[str, int] = {}
    for group, topics in _GROUPS.items():
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        try:
            wanted = [
                TopicPartition(topology.name(t), p)
                for t in topics
                for p in range(topology.partitions_for(t))
            ]
            committed = consumer.committed(wanted, timeout=10)
            total = 0
            for tp in committed:
                _, high = consumer.get_watermark_offsets(tp, timeout=10)
                total += high - max(tp.offset, 0)
            lag[group] = total
        except KafkaException:
            lag[group] = -1
        finally:
            consumer.close()
    return lag


class _Sampler:
    """Per-process RSS and open fds, and group lag, every ``sample_s`` (printed as it goes)."""

    def __init__(self, stack: Stack, sample_s: float, out: TextIO) -> None:
        self.stack = stack
        self.sample_s = sample_s
        self.out = out
        self.samples: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def sample(self) -> dict[str, Any]:
        stack = self.stack
        minute = (time.monotonic() - self.started) / 60
        rss = {n: stack.rss_bytes(n) for n in PIPELINE}
        fds = {n: stack.open_fds(n) for n in PIPELINE}
        lag = group_lag(stack.bootstrap, stack.topology)
        found = {"minute": round(minute, 2), "rss": rss, "fds": fds, "lag": lag}
        self.samples.append(found)
        cells = "  ".join(
            f"{n}: {(rss[n] or 0) / _MIB:6.1f} MiB {fds[n] or 0:3d} fds" for n in PIPELINE
        )
        lags = " ".join(f"{g.removeprefix('vigil.')}={v}" for g, v in lag.items())
        print(f"soak {minute:5.1f} min  {cells}  lag {lags}", file=self.out, flush=True)
        return found

    def _loop(self) -> None:
        self.sample()
        while not self._stop.wait(self.sample_s):
            self.sample()


def _growth(samples: list[dict[str, Any]], warmup: float, name: str) -> dict[str, Any]:
    """RSS at the first sample past the warm-up and at the last; their relative growth."""
    series = [(s["minute"], s["rss"][name], s["fds"][name]) for s in samples]
    series = [x for x in series if x[1] is not None]
    warm = next((x for x in series if x[0] >= warmup), series[-1])
    last = series[-1]
    return {
        "rss_mib_start": round(series[0][1] / _MIB, 1),
        "rss_mib_after_warmup": round(warm[1] / _MIB, 1),
        "rss_mib_end": round(last[1] / _MIB, 1),
        "rss_mib_max_after_warmup": round(max(x[1] for x in series if x[0] >= warm[0]) / _MIB, 1),
        "rss_growth_after_warmup": round((last[1] - warm[1]) / warm[1], 4),
        "fds_after_warmup": warm[2],
        "fds_end": last[2],
    }


def run(
    settings: SoakSettings,
    *,
    bootstrap: str,
    redis_url: str,
    root: Path,
    out: TextIO = sys.stderr,
) -> dict[str, Any]:
    """One soak against a broker and Redis of its own (they may be restarted by nobody else)."""
    with Receiver(secret=SECRET, bot_token=BOT_TOKEN) as receiver:
        receiver.serve_json("/status", {"status": "down"})
        receiver.fail_every(settings.fail_every, 500)
        stack = Stack(root, bootstrap=bootstrap, redis_url=redis_url, receiver_url=receiver.url)
        try:
            return _run(settings, stack, receiver, out)
        finally:
            stack.stop_all(timeout_s=60)


def _run(settings: SoakSettings, stack: Stack, receiver: Receiver, out: TextIO) -> dict[str, Any]:
    stack.create_topics()
    stack.start_all()
    subject = Subject.fresh(stack, "soak")
    events = {f"e-{n}": f"src.{n}" for n in range(settings.event_watchers)}
    polls = {f"p-{n}": f"status.{n % 10}" for n in range(settings.pollers)}
    started = stack.now()
    end = (started + timedelta(minutes=settings.minutes)).replace(second=30, microsecond=0)
    activated: dict[str, datetime] = {}
    with subject.client() as client:
        subject.grant(client, [*events.values(), *polls.values()])
        subject.control_grant(client, CHAT)
        for name, source in events.items():
            subject.create(client, event_watcher(name, source, _MAX_AGE, _RETENTION))
        for name, source in polls.items():
            body = polling_watcher(
                name, source, expires_at=end, max_age=_MAX_AGE, retention=_RETENTION
            )
            activated[name] = _activated(subject.create(client, body).result)
        for n in range(settings.schedules):
            body = schedule_watcher(CHAT, f"s{n}", f"soak schedule s{n}", end)
            activated[body["watcher_id"]] = _activated(subject.create(client, body).result)
    print(f"soak: {stack.topology.prefix} load until {end.isoformat()}", file=out, flush=True)

    load = EventLoad(stack.bootstrap, stack.topology, subject, events)
    sampler = _Sampler(stack, settings.sample_s, out)
    sampler.start()
    published = 0
    tick = time.monotonic()
    while stack.now() < end:
        stack.check_alive()
        if stack.unexpected:
            break
        tick += 1.0
        batch = int(settings.events_per_s * (tick - sampler.started)) - published
        if batch > 0:
            load.publish(published, published + batch, batch=max(batch, 1))
            published += batch
        time.sleep(max(0.0, tick - time.monotonic()))
    sampler.sample()  # the end of the load: the growth is measured up to here
    load_samples = list(sampler.samples)

    expect = _expectation(subject, load, published, events, polls, activated, end)
    checker = Checker(stack.bootstrap, stack.redis_url, stack.topology, receiver)
    settled = checker.wait_settled(expect, settings.settle_s, alive=stack.check_alive)
    sampler.stop()
    verdict = checker.verdict(expect)
    lag = group_lag(stack.bootstrap, stack.topology)
    codes = stack.stop_all(timeout_s=60)
    return _report(settings, load_samples, verdict, settled, lag, published, stack, codes)


def _activated(result: dict[str, Any] | None) -> datetime:
    assert result is not None
    return parse_instant(result["activated_at"], "activated_at")


def _expectation(
    subject: Subject,
    load: EventLoad,
    published: int,
    events: dict[str, str],
    polls: dict[str, str],
    activated: dict[str, datetime],
    end: datetime,
) -> Expectation:
    deliveries = load.expected(0, published)
    plans = []
    for name, source in polls.items():
        instants = frozenset(minutes_between(activated[name], end))
        plans.append(TickPlan(subject.watcher_key(name), instants))
        deliveries |= {poll_key(subject.tenant, subject.user, name, source, at) for at in instants}
    keyless = set()
    for watcher_id, at in activated.items():
        if not watcher_id.startswith("schedule:"):
            continue
        source = watcher_id.rsplit(":", 1)[0]
        for instant in minutes_between(at, end):
            keyless.add(
                poll_key(subject.tenant, subject.user, watcher_id, source, instant, "schedule")
            )
    return Expectation(
        deliveries=deliveries | keyless,
        keyless=keyless,
        answered=subject.answered,
        sent=subject.sent,
        ticks=plans,
    )


def _report(
    settings: SoakSettings,
    samples: list[dict[str, Any]],
    verdict: Verdict,
    settled: bool,
    lag: dict[str, int],
    published: int,
    stack: Stack,
    codes: dict[str, int | None],
) -> dict[str, Any]:
    processes = {name: _growth(samples, settings.warmup_minutes, name) for name in PIPELINE}
    return {
        "benchmark": "soak",
        "minutes": settings.minutes,
        "warmup_minutes": settings.warmup_minutes,
        "events_published": published,
        "events_per_s": settings.events_per_s,
        "event_watchers": settings.event_watchers,
        "pollers": settings.pollers,
        "schedules": settings.schedules,
        "receiver_failure_rate": round(1 / settings.fail_every, 3),
        "processes": processes,
        "rss_growth_after_warmup": {n: p["rss_growth_after_warmup"] for n, p in processes.items()},
        "rss_growth_goal": 0.10,
        "lag_end": lag,
        "lost": verdict.lost,
        "duplicates": verdict.duplicates,
        "settled": settled,
        "exited_on_their_own": dict(stack.unexpected),
        "exit_codes": codes,
        "checker": verdict.summary(),
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    defaults = SoakSettings()
    parser.add_argument("--minutes", type=float, default=defaults.minutes)
    parser.add_argument("--warmup-minutes", type=float, default=defaults.warmup_minutes)
    parser.add_argument("--events-per-s", type=float, default=defaults.events_per_s)
    parser.add_argument("--event-watchers", type=int, default=defaults.event_watchers)
    parser.add_argument("--pollers", type=int, default=defaults.pollers)
    parser.add_argument("--schedules", type=int, default=defaults.schedules)
    parser.add_argument("--fail-every", type=int, default=defaults.fail_every)
    args = parser.parse_args(argv)
    # The run's own stack seals with a KEK of its own unless one is given (processes inherit it).
    os.environ.setdefault(DEFAULT_ENV, generate_kek_text("soak"))
    settings = SoakSettings(
        minutes=args.minutes,
        warmup_minutes=args.warmup_minutes,
        events_per_s=args.events_per_s,
        event_watchers=args.event_watchers,
        pollers=args.pollers,
        schedules=args.schedules,
        fail_every=args.fail_every,
    )
    kafka_port, controller, redis_port = worker_ports(slot=2)
    with tempfile.TemporaryDirectory(prefix="vigil-soak-") as tmp:
        root = Path(tmp)
        kafka = OwnKafka(kafka_port, controller, root / "kafka")
        redis = OwnRedis(redis_port, root / "redis")
        try:
            print(kafka.start(), file=sys.stderr)
            print(redis.start(), file=sys.stderr)
            report = run(
                settings, bootstrap=kafka.bootstrap, redis_url=redis.url, root=root / "stack"
            )
        finally:
            redis.stop()
            kafka.stop()
    print(json.dumps(report, separators=(",", ":"), default=str))
    ok = report["checker"]["ok"] and report["settled"] and not report["exited_on_their_own"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
