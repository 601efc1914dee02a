"""The stream runtime against the real broker: restore, dead letters, pauses, rebalances, tables."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from prometheus_client import CollectorRegistry

from pipeline.kafka.clients import BrokerFailure, ErrorKind, consumer_config, producer_config
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import MAGIC, default_codec
from pipeline.kafka.topics import DLQ_OFFSET, DLQ_PARTITION, DLQ_REASON, DLQ_TOPIC
from pipeline.rules.errors import SerdeError, UnknownSchemaError
from pipeline.runtime.app import (
    InputRecord,
    ProcessContext,
    StreamApp,
    TransactionEnd,
)
from pipeline.runtime.checkpoint import committed_offsets
from pipeline.runtime.tables import TableKind, TableSpec
from tests.integration.runtime_helpers import create_topics, produce_inputs, read_all, read_table
from tests.integration.toy_counter import count_processor, make_app

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.fixture
def topology(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> dict[str, str]:
    names = {
        "a": unique_name("rt-in-a"),
        "b": unique_name("rt-in-b"),
        "out": unique_name("rt-out"),
        "dlq": unique_name("rt-dlq"),
    }
    create_topics(kafka_bootstrap, PARTITIONS, *names.values())
    names["changelog"] = unique_name("rt-counts")
    create_topics(kafka_bootstrap, PARTITIONS, names["changelog"], compact=True)
    names["group"] = unique_name("rt-group")
    return names


@pytest.fixture
def apps() -> Iterator[list[StreamApp]]:
    made: list[StreamApp] = []
    yield made
    for app in made:
        app.close(commit=False)


def inputs(n: int, start: int = 0, keys: int = 10) -> list[tuple[str, bytes]]:
    return [(f"k{i % keys}", b"id-%06d" % i) for i in range(start, start + n)]


def run_until(app: StreamApp, done: Callable[[], bool], seconds: float = 60.0) -> None:
    app.run_for(seconds, until=done)
    assert done(), "the app did not get there in time"


def counting(app: StreamApp, want: int) -> Callable[[], bool]:
    seen = [0]

    def done() -> bool:
        return seen[0] >= want

    original = app._batches.processor

    def process(batch: list[InputRecord], ctx: ProcessContext) -> None:
        original(batch, ctx)
        seen[0] += len(batch)

    app._batches.processor = process
    return done


def assert_counts_exact(outputs: list[Message], sent: list[tuple[str, bytes]]) -> None:
    ids = Counter((m.value() or b"").split(b":")[0] for m in outputs)
    assert len(ids) == len(sent) and set(ids.values()) == {1}, "an input was lost or repeated"
    per_key: dict[str, list[int]] = {}
    for m in outputs:
        per_key.setdefault((m.key() or b"").decode(), []).append(
            int((m.value() or b"").split(b":")[1])
        )
    truth = Counter(key for key, _ in sent)
    for key, counts in per_key.items():
        assert sorted(counts) == list(range(1, truth[key] + 1)), f"counts of {key} skip or repeat"


def test_restart_restores_table_and_counts_continue_without_double_apply(
    kafka_bootstrap: str, topology: dict[str, str], apps: list[StreamApp]
) -> None:
    first = inputs(150) + inputs(150, start=150)
    produce_inputs(kafka_bootstrap, topology["a"], PARTITIONS, first[:150])
    produce_inputs(kafka_bootstrap, topology["b"], PARTITIONS, first[150:])
    t = topology
    app = make_app(kafka_bootstrap, [t["a"], t["b"]], t["out"], t["changelog"], t["group"], "one")
    apps.append(app)
    run_until(app, counting(app, 300))
    app.close()
    before = read_table(kafka_bootstrap, t["changelog"])
    assert before == {k: str(v).encode() for k, v in Counter(k for k, _ in first).items()}

    second = inputs(200, start=300)
    produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, second)
    again = make_app(kafka_bootstrap, [t["a"], t["b"]], t["out"], t["changelog"], t["group"], "one")
    apps.append(again)
    run_until(again, counting(again, 200))
    again.close()

    _assert_exact(kafka_bootstrap, t, first + second)


def test_restore_resumes_past_reflected_inputs_when_group_offsets_are_gone(
    kafka_bootstrap: str, topology: dict[str, str], apps: list[StreamApp], unique_name: Any
) -> None:
    t = topology
    sent = inputs(120)
    produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, sent)
    app = make_app(kafka_bootstrap, [t["a"]], t["out"], t["changelog"], t["group"], "one")
    apps.append(app)
    run_until(app, counting(app, 120))
    app.close()

    # A new group has no committed offsets: only the changelog's offsets header prevents
    # counting the same 120 inputs a second time.
    more = inputs(30, start=120)
    produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, more)
    other = make_app(
        kafka_bootstrap, [t["a"]], t["out"], t["changelog"], unique_name("rt-new-group"), "one"
    )
    apps.append(other)
    run_until(other, counting(other, 30), seconds=30)
    other.run_for(1.0)  # a double-apply would surface as extra records here
    other.close()
    assert_counts_exact(read_all(kafka_bootstrap, t["out"]), sent + more)


def test_garbage_record_dead_letters_with_headers_and_partition_moves_on(
    kafka_bootstrap: str, topology: dict[str, str], apps: list[StreamApp]
) -> None:
    t = topology

    def decode(msg: Message) -> bytes:
        value = msg.value() or b""
        if value.startswith(b"garbage"):
            raise SerdeError("not a vigil record")
        return value

    key = "k1"
    records = [(key, b"id-1"), (key, b"garbage!"), (key, b"id-2")]
    produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, records)
    app = make_app(
        kafka_bootstrap,
        [t["a"]],
        t["out"],
        t["changelog"],
        t["group"],
        "one",
        decode=decode,
        dead_letter_topic=t["dlq"],
    )
    apps.append(app)
    run_until(app, counting(app, 2))
    app.close()

    outputs = read_all(kafka_bootstrap, t["out"])
    assert sorted(m.value() or b"" for m in outputs) == [b"id-1:1", b"id-2:2"]
    (dead,) = read_all(kafka_bootstrap, t["dlq"])
    headers = dict(dead.headers() or [])
    assert dead.key() == key.encode() and dead.value() == b"garbage!"
    assert headers[DLQ_REASON] == b"not a vigil record"
    assert headers[DLQ_TOPIC] == t["a"].encode()
    partition = outputs[0].partition()
    assert headers[DLQ_PARTITION] == str(partition).encode()
    assert headers[DLQ_OFFSET] == b"1"
    committed = _committed(kafka_bootstrap, t["group"], t["a"], partition or 0)
    assert committed == 3


def test_unknown_schema_pauses_its_partition_and_never_dead_letters(
    kafka_bootstrap: str, topology: dict[str, str], apps: list[StreamApp]
) -> None:
    t = topology

    def decode(msg: Message) -> bytes:
        value = msg.value() or b""
        if value.startswith(b"future"):
            raise UnknownSchemaError("fingerprint 0x1234 unknown")
        return value

    stalled, moving = "k1", "k2"
    while partition_for(moving, PARTITIONS) == partition_for(stalled, PARTITIONS):
        moving += "x"
    produce_inputs(
        kafka_bootstrap,
        t["a"],
        PARTITIONS,
        [(stalled, b"id-1"), (stalled, b"future"), (stalled, b"id-2"), (moving, b"id-3")],
    )
    app = make_app(
        kafka_bootstrap,
        [t["a"]],
        t["out"],
        t["changelog"],
        t["group"],
        "one",
        decode=decode,
        dead_letter_topic=t["dlq"],
    )
    apps.append(app)
    run_until(app, counting(app, 2))
    app.run_for(1.0)
    assert app.paused == {(t["a"], partition_for(stalled, PARTITIONS))}
    app.close()

    outputs = sorted(m.value() or b"" for m in read_all(kafka_bootstrap, t["out"]))
    assert outputs == [b"id-1:1", b"id-3:1"]
    assert read_all(kafka_bootstrap, t["dlq"]) == []
    assert _committed(kafka_bootstrap, t["group"], t["a"], partition_for(stalled, PARTITIONS)) == 1


def test_processor_failing_on_one_record_dead_letters_it_alone_and_never_stops(
    kafka_bootstrap: str, topology: dict[str, str], apps: list[StreamApp]
) -> None:
    t = topology
    good = inputs(300)
    poison = [("k3", b"poison-1"), ("k3", b"poison-2"), ("k7", b"poison-3")]
    sent = good[:100] + poison[:1] + good[100:200] + poison[1:] + good[200:]
    produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, sent)
    counter = count_processor(t["out"])
    metrics = CollectorRegistry()

    def fragile(batch: list[InputRecord], ctx: ProcessContext) -> None:
        for record in batch:
            if record.value.startswith(b"poison"):
                raise RuntimeError(f"cannot count {record.value.decode()}")
        counter(batch, ctx)

    app = StreamApp(
        kafka_bootstrap,
        t["group"],
        "one",
        [t["a"]],
        fragile,
        tables=[TableSpec("counts", t["changelog"], TableKind.OWNED)],
        dead_letter_topic=t["dlq"],
        metrics_registry=metrics,
    )
    apps.append(app)
    labels = {"group": t["group"], "topic": t["a"], "cause": "processing_failed"}

    def done() -> bool:
        letters = metrics.get_sample_value("vigil_runtime_dead_letters_total", labels) or 0
        return letters >= 3 and not app._batches.isolation.active

    run_until(app, done, seconds=240)
    app.run_for(1.0)
    app.transaction().commit()

    assert_counts_exact(read_all(kafka_bootstrap, t["out"]), good)  # each exactly once
    letters = read_all(kafka_bootstrap, t["dlq"])
    assert sorted(m.value() or b"" for m in letters) == [v for _, v in poison]
    for letter in letters:
        reason = _header(letter, DLQ_REASON)
        assert reason.startswith(b"processing failed: RuntimeError: cannot count poison-")
    for p in range(PARTITIONS):  # nothing stalls: every partition committed to its end
        end = Counter(partition_for(k, PARTITIONS) for k, _ in sent)[p]
        assert _committed(kafka_bootstrap, t["group"], t["a"], p) == end


def test_unknown_fingerprint_pauses_if_registered_and_is_dead_lettered_if_not(
    kafka_bootstrap: str,
    topology: dict[str, str],
    apps: list[StreamApp],
    unique_name: Callable[[str], str],
) -> None:
    t = topology
    schemas = unique_name("rt-schemas")
    create_topics(kafka_bootstrap, 1, schemas, compact=True)
    newer, forged = bytes.fromhex("00112233445566aa"), bytes.fromhex("99887766554433bb")
    produce_inputs(kafka_bootstrap, schemas, 1, [(newer.hex(), b'{"type":"record"}')])
    codec = default_codec()

    def decode(msg: Message) -> bytes:
        codec.writer_of(msg.value() or b"")
        return msg.value() or b""

    def record(event_id: str) -> bytes:
        value = {
            "source_id": "s",
            "event_type": "t",
            "event_id": event_id,
            "envelope_id": None,
            "cursor": None,
            "observed_at": datetime.now(UTC),
            "payload": "{}",
        }
        return codec.encode("event", value)

    stalled, moving = "k1", "k2"
    while partition_for(moving, PARTITIONS) == partition_for(stalled, PARTITIONS):
        moving += "x"
    produce_inputs(
        kafka_bootstrap,
        t["a"],
        PARTITIONS,
        [
            (stalled, record("e-1")),
            (stalled, MAGIC + newer + b"body"),  # a newer writer's: wait for an upgrade
            (stalled, record("e-2")),
            (moving, MAGIC + forged + b"body"),  # registered by no writer: garbage
            (moving, record("e-3")),
        ],
    )
    app = make_app(
        kafka_bootstrap,
        [t["a"]],
        t["out"],
        t["changelog"],
        t["group"],
        "one",
        decode=decode,
        dead_letter_topic=t["dlq"],
        schemas_topic=schemas,
    )
    apps.append(app)
    run_until(app, counting(app, 2))
    app.run_for(1.0)
    assert app.paused == {(t["a"], partition_for(stalled, PARTITIONS))}
    app.close()

    (letter,) = read_all(kafka_bootstrap, t["dlq"])
    assert letter.value() == MAGIC + forged + b"body"
    reason = _header(letter, DLQ_REASON)
    assert forged.hex().encode() in reason and b"registered by no writer" in reason
    assert _committed(kafka_bootstrap, t["group"], t["a"], partition_for(stalled, PARTITIONS)) == 1
    assert _committed(kafka_bootstrap, t["group"], t["a"], partition_for(moving, PARTITIONS)) == 2


def test_second_member_takes_range_aligned_partitions_and_output_stays_exact(
    kafka_bootstrap: str, topology: dict[str, str], apps: list[StreamApp]
) -> None:
    t = topology
    ins = [t["a"], t["b"]]
    one = make_app(kafka_bootstrap, ins, t["out"], t["changelog"], t["group"], "one")
    two = make_app(kafka_bootstrap, ins, t["out"], t["changelog"], t["group"], "two")
    apps.extend([one, two])
    stops = [threading.Event(), threading.Event()]
    sent = inputs(200)
    produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, sent)
    threads = [threading.Thread(target=one.run, args=(stops[0],), daemon=True)]
    threads[0].start()
    _wait(lambda: len(one.assignment()) == 2 * PARTITIONS)
    threads.append(threading.Thread(target=two.run, args=(stops[1],), daemon=True))
    threads[1].start()
    _wait(lambda: bool(two.assignment()) and bool(one.assignment()))
    more = inputs(200, start=200)
    produce_inputs(kafka_bootstrap, t["b"], PARTITIONS, more)
    _wait(lambda: len(read_all(kafka_bootstrap, t["out"], max_s=10)) >= 400, seconds=60)
    mine, theirs = one.assignment(), two.assignment()
    for stop, thread in zip(stops, threads, strict=True):
        stop.set()
        thread.join(30)

    for member in (mine, theirs):
        numbers = {topic: {p for tp, p in member if tp == topic} for topic in ins}
        assert numbers[t["a"]] == numbers[t["b"]] != set(), "range assignment misaligned"
    assert {p for _, p in mine}.isdisjoint({p for _, p in theirs})
    assert len(mine) + len(theirs) == 2 * PARTITIONS
    assert_counts_exact(read_all(kafka_bootstrap, t["out"]), sent + more)


def test_read_only_tables_are_caught_up_before_each_batch(
    kafka_bootstrap: str, topology: dict[str, str], apps: list[StreamApp], unique_name: Any
) -> None:
    t = topology
    grants, watchers = unique_name("rt-grants"), unique_name("rt-watchers")
    create_topics(kafka_bootstrap, 2, grants, compact=True)
    create_topics(kafka_bootstrap, PARTITIONS, watchers, compact=True)

    def process(batch: list[InputRecord], ctx: ProcessContext) -> None:
        for record in batch:
            key = (record.key or b"").decode()
            grant = ctx.table("grants").get("g") or b"-"
            watcher = ctx.table("watchers").get(key) or b"-"
            ctx.produce(t["out"], key, b"%s|%s|%s" % (record.value, grant, watcher))

    app = StreamApp(
        kafka_bootstrap,
        t["group"],
        "one",
        [t["a"]],
        process,
        tables=[
            TableSpec("grants", grants, TableKind.GLOBAL),
            TableSpec("watchers", watchers, TableKind.EXTERNAL),
        ],
    )
    apps.append(app)
    produce_inputs(kafka_bootstrap, grants, 2, [("g", b"v1")])
    produce_inputs(kafka_bootstrap, watchers, PARTITIONS, [("k1", b"w1")])
    produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, [("k1", b"id-1")])
    run_until(app, counting(app, 1))
    for round_ in (2, 3):
        produce_inputs(kafka_bootstrap, grants, 2, [("g", b"v%d" % round_)])
        produce_inputs(kafka_bootstrap, watchers, PARTITIONS, [("k1", b"w%d" % round_)])
        produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, [("k1", b"id-%d" % round_)])
        run_until(app, counting(app, 1))
    app.close()

    values = [m.value() for m in read_all(kafka_bootstrap, t["out"])]
    assert values == [b"id-1|v1|w1", b"id-2|v2|w2", b"id-3|v3|w3"]


def test_processor_failure_aborts_rolls_back_and_reprocesses_exactly_once(
    kafka_bootstrap: str, topology: dict[str, str], apps: list[StreamApp]
) -> None:
    t = topology
    sent = inputs(50, keys=3)
    produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, sent)
    app = make_app(
        kafka_bootstrap,
        [t["a"]],
        t["out"],
        t["changelog"],
        t["group"],
        "one",
        commit_every=20,
        dead_letter_topic=t["dlq"],
    )
    apps.append(app)
    counted = app._batches.processor
    failed = [False]

    def flaky(batch: list[InputRecord], ctx: ProcessContext) -> None:
        counted(batch, ctx)  # table writes and outputs happen, then the batch fails
        if not failed[0] and any(r.value == b"id-000030" for r in batch):
            failed[0] = True
            raise RuntimeError("boom")

    app._batches.processor = flaky
    # The failure is the batch's, never the process's: it is rolled back and replayed one
    # record at a time, and the record that failed once succeeds alone (nothing dead-lettered).
    app.run_for(60, until=lambda: failed[0] and _table_total(app) == 50)
    app.run_for(0.5)
    app.close()
    assert failed[0]
    assert read_all(kafka_bootstrap, t["dlq"]) == []
    _assert_exact(kafka_bootstrap, t, sent)


def _table_total(app: StreamApp) -> int:
    return sum(int(v) for table in app.tables for _, v in table.items())


def _header(msg: Message, name: str) -> bytes:
    value = dict(msg.headers() or []).get(name)
    return value.encode() if isinstance(value, str) else value or b""


def _committed(bootstrap: str, group: str, topic: str, partition: int) -> int:
    consumer = Consumer(consumer_config(bootstrap, group))
    try:
        (tp,) = consumer.committed([TopicPartition(topic, partition)], timeout=10)
        return tp.offset
    finally:
        consumer.close()


def _wait(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def _assert_exact(bootstrap: str, t: dict[str, str], sent: list[tuple[str, bytes]]) -> None:
    """Every input counted once in the output, and the changelog holds the true counts."""
    assert_counts_exact(read_all(bootstrap, t["out"]), sent)
    truth = Counter(k for k, _ in sent)
    assert read_table(bootstrap, t["changelog"]) == {k: str(v).encode() for k, v in truth.items()}


def _half_done(
    bootstrap: str, t: dict[str, str], apps: list[StreamApp], sent: list[tuple[str, bytes]]
) -> StreamApp:
    """An app that has processed and committed the first half of ``sent`` (one input)."""
    produce_inputs(bootstrap, t["a"], PARTITIONS, sent[: len(sent) // 2])
    app = make_app(bootstrap, [t["a"]], t["out"], t["changelog"], t["group"], "one")
    apps.append(app)
    run_until(app, counting(app, len(sent) // 2))
    app.transaction().commit()
    return app


def test_fenced_producer_is_rebuilt_and_output_stays_exact(
    kafka_bootstrap: str, topology: dict[str, str], apps: list[StreamApp]
) -> None:
    t = topology
    sent = inputs(100)
    app = _half_done(kafka_bootstrap, t, apps, sent)

    # Another producer with the app's transactional.id fences the app's producer (a zombie's
    # view of the world); the app must rebuild it, restore its tables and carry on exactly once.
    fenced = app._member._producer
    rival = Producer(producer_config(kafka_bootstrap, transactional_id=f"{t['group']}-one"))
    rival.init_transactions(30)
    produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, sent[50:])
    app.run_for(60, until=lambda: app._member._producer is not fenced and _table_total(app) == 100)
    app.run_for(0.5)
    rebuilt, total = app._member._producer is not fenced, _table_total(app)
    app.close()

    assert rebuilt and total == 100
    _assert_exact(kafka_bootstrap, t, sent)


def test_resync_whose_consumer_gets_no_answer_replaces_it_and_output_stays_exact(
    kafka_bootstrap: str,
    topology: dict[str, str],
    apps: list[StreamApp],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a broker restart a consumer can keep asking a group coordinator it lost (librdkafka
    #5511): its committed-offsets read times out while the broker answers everyone else. The
    resync then replaces the consumer; its partitions come back through a new join, once."""
    t = topology
    sent = inputs(100)
    app = _half_done(kafka_bootstrap, t, apps, sent)

    real = committed_offsets
    stuck = [1]  # the first read after the resync gets no answer, like the stuck consumer

    def committed(consumer: Consumer, partitions: list[TopicPartition], timeout_s: float) -> Any:
        if stuck[0]:
            stuck[0] -= 1
            raise BrokerFailure(
                "committed offsets: Local: Timed out", code="_TIMED_OUT", kind=ErrorKind.RETRIABLE
            )
        return real(consumer, partitions, timeout_s)

    monkeypatch.setattr("pipeline.runtime.transactions.committed_offsets", committed)
    retired = app._member._consumer
    app.request_resync("test: the broker restarted")
    produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, sent[50:])
    app.run_for(60, until=lambda: _table_total(app) == 100 and app.assignment() != [])
    app.run_for(0.5)
    replaced, total, stuck_left = app._member._consumer is not retired, _table_total(app), stuck[0]
    app.close()

    assert stuck_left == 0 and replaced and total == 100
    _assert_exact(kafka_bootstrap, t, sent)


def test_timer_transaction_without_input_position_still_fences_a_zombie(
    kafka_bootstrap: str, topology: dict[str, str], apps: list[StreamApp]
) -> None:
    """KIP-447 fences only through ``send_offsets_to_transaction``: a member whose inputs
    delivered nothing since assignment (a restart with nothing new) still sends where they
    resumed, so its timer-driven transaction carries the group metadata and a zombie's fails."""
    t = topology
    sent = inputs(6)
    produce_inputs(kafka_bootstrap, t["a"], PARTITIONS, sent)
    first = make_app(kafka_bootstrap, [t["a"]], t["out"], t["changelog"], t["group"], "first")
    apps.append(first)
    run_until(first, counting(first, len(sent)))
    first.close()
    committed = [_committed(kafka_bootstrap, t["group"], t["a"], p) for p in range(PARTITIONS)]

    zombie = StreamApp(
        kafka_bootstrap,
        t["group"],
        "zombie",
        [t["a"]],
        count_processor(t["out"]),
        tables=[TableSpec("counts", t["changelog"], TableKind.OWNED)],
        consumer_overrides={
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 7000,
        },
    )
    apps.append(zombie)
    run_until(zombie, lambda: len(zombie.assignment()) == PARTITIONS)
    assert zombie._member._consumer is not None
    held = [TopicPartition(t["a"], p) for p in range(PARTITIONS)]
    assert all(tp.offset < 0 for tp in zombie._member._consumer.position(held))  # nothing read

    def write(value: bytes) -> Callable[[Callable[[int], ProcessContext]], None]:
        return lambda context_of: context_of(0).produce(t["out"], "timer", value, 0)

    assert zombie.transaction().run(write(b"live")) is TransactionEnd.COMMITTED
    after = [_committed(kafka_bootstrap, t["group"], t["a"], p) for p in range(PARTITIONS)]
    assert after == committed  # sent where the inputs resumed: neither skipped nor rewound

    # The zombie stops polling; the group hands every partition to the survivor.
    survivor = make_app(kafka_bootstrap, [t["a"]], t["out"], t["changelog"], t["group"], "two")
    apps.append(survivor)
    run_until(survivor, lambda: len(survivor.assignment()) == PARTITIONS)
    aborts = zombie.transaction().aborts
    assert zombie.transaction().run(write(b"zombie")) is TransactionEnd.ABORTED
    assert zombie.transaction().aborts > aborts

    values = [m.value() for m in read_all(kafka_bootstrap, t["out"]) if m.key() == b"timer"]
    assert values == [b"live"]
