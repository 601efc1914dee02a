"""The command processor against the real broker: what each command writes, where, and refusals
(immediate sends included: their outbox entries go out in the processor's transaction)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from consumers.commands import CommandDeps, CommandProcessor, CommandSettings
from pipeline.control.client import CommandClient, operator_principal
from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.clients import producer_config
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.command import encode_command
from pipeline.records.command_result import result_from_value
from pipeline.records.outbox_entry import decode_outbox_entry
from pipeline.rules.authz import Action, Principal, Role
from pipeline.rules.commands import CommandResult, CommandVerb, GrantSpec, ResultCode
from pipeline.rules.commands.immediate import daemon_grant
from pipeline.rules.keys import derived_delivery_key, request_delivery_key, subject_key, watcher_key
from pipeline.runtime.keys import read_keys
from tests.integration.runtime_helpers import read_all, read_table
from tests.names import fresh

pytestmark = pytest.mark.integration

PARTITIONS = 3
TENANT, USER = "acme", "u-1"


@dataclass
class Plane:
    topology: Topology
    client: CommandClient
    bootstrap: str
    running: Running

    def restart(self) -> None:
        """Stop the processor (commit, leave the group) and start a fresh one: state restores."""
        self.running.stop()
        self.running = Running(self.bootstrap, self.topology)

    def send(self, verb: CommandVerb, **fields: Any) -> CommandResult:
        principal = operator_principal("local", "ops")
        command = self.client.command(verb, principal, TENANT, USER, **fields)
        return self.client.send(command)

    def grant(self, *sources: str, actions: tuple[Action, ...] = (Action.MANAGE,)) -> str:
        spec = GrantSpec(
            tenant_id=TENANT,
            user_id=USER,
            purpose="ops.alert",
            sources=sources,
            targets=("ops-hook",),
            actions=actions,
            until=datetime.now(UTC) + timedelta(days=1),
        )
        result = self.send(CommandVerb.GRANT_ADD, grant=spec)
        assert result.ok, result.error
        assert result.result is not None
        return str(result.result["grant_id"])

    def topic(self, topic: Topic) -> str:
        return self.topology.name(topic)

    def ring(self) -> KeyRing:
        """The subject's data keys as ``keys`` holds them now."""
        ring = KeyRing(KeyEncryptionKeys.load(), default_codec())
        read_keys(self.bootstrap, self.topology, ring, [(TENANT, USER)])
        return ring

    def records(self, topic: Topic) -> list[tuple[int, str, dict[str, Any] | None]]:
        """(partition, key, decoded value or None) of every committed record, in offset order."""
        out = []
        for msg in read_all(self.bootstrap, self.topic(topic)):
            raw = msg.value()
            value = None if raw is None else default_codec().decode(raw)[1]
            out.append((msg.partition() or 0, (msg.key() or b"").decode(), value))
        return out

    def wait_for(self, topic: Topic, key: str, seconds: float = 30) -> list[dict[str, Any]]:
        """The values under ``key`` once at least one is committed."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = [v for _, k, v in self.records(topic) if k == key and v is not None]
            if found:
                return found
        raise AssertionError(f"no {key} on {topic} in {seconds}s")


class SlowProcessor(CommandProcessor):
    """A processor whose every command takes ``slow_s`` more: what a subject with thousands
    of watchers costs (a view rebuilt per command), without making thousands."""

    slow_s = 0.0

    def _one(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(self.slow_s)
        super()._one(*args, **kwargs)


class Running:
    """A command processor in a thread; :meth:`stop` commits and leaves the group."""

    def __init__(
        self,
        bootstrap: str,
        topology: Topology,
        *,
        slow_s: float = 0.0,
        producer_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.metrics = CollectorRegistry()
        self.processor = SlowProcessor(
            CommandSettings(
                bootstrap,
                topology,
                instance_id="test",
                consumer_overrides={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
                producer_overrides=producer_overrides or {},
            ),
            CommandDeps(metrics_registry=self.metrics),
        )
        self.processor.slow_s = slow_s
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="command-processor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.processor.run(self._stop)
        except BaseException as exc:  # surfaced by stop()
            self.failures.append(exc)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the processor did not stop"
        assert not self.failures, self.failures


@pytest.fixture
def plane(kafka_bootstrap: str) -> Iterator[Plane]:
    topology = Topology(fresh("t-cmd") + ".", PARTITIONS)
    ensure_topics(connect_admin(kafka_bootstrap), topology)
    client = CommandClient(kafka_bootstrap, topology, timeout_s=30)
    found = Plane(topology, client, kafka_bootstrap, Running(kafka_bootstrap, topology))
    try:
        yield found
    finally:
        client.close()
        found.running.stop()


def definition(watcher_id: str = "build-failed", source_id: str = "ci.pipeline") -> dict[str, Any]:
    return {
        "watcher_id": watcher_id,
        "purpose": "ops.alert",
        "source": {
            "kind": "event",
            "source_id": source_id,
            "event_type": "build.finished",
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "ops-hook"},
        "expires_at": "2027-06-01T00:00:00Z",
    }


def sources_on_distinct_partitions() -> tuple[str, str]:
    first = "ci.pipeline"
    for n in range(100):
        other = f"ci.other-{n}"
        if partition_for(other, PARTITIONS) != partition_for(first, PARTITIONS):
            return first, other
    raise AssertionError("no source on another partition")


def test_create_writes_watcher_on_source_partition_registry_lifecycle_and_definition_log(
    plane: Plane,
) -> None:
    plane.grant("ci.pipeline")
    result = plane.send(CommandVerb.CREATE, definition=definition())
    assert result.ok, result.error
    assert result.result is not None
    assert (result.result["status"], result.result["version"]) == ("active", 1)

    key = watcher_key(TENANT, USER, "build-failed")
    watchers = [r for r in plane.records(Topic.WATCHERS) if r[1] == key]
    assert [(p, v["status"], v["version"]) for p, _, v in watchers if v] == [
        (partition_for("ci.pipeline", PARTITIONS), "active", 1)
    ]
    assert watchers[0][2] is not None
    assert (watchers[0][2]["source_kind"], watchers[0][2]["event_type"]) == (
        "event",
        "build.finished",
    )
    logged = plane.records(Topic.DEFINITION_LOG)
    assert [(p, k, v["version"]) for p, k, v in logged if v] == [
        (partition_for(subject_key(TENANT, USER), PARTITIONS), key, 1)
    ]
    lifecycle = read_table(plane.bootstrap, plane.topic(Topic.LIFECYCLE))
    assert default_codec().decode(lifecycle[key])[1]["status"] == "active"
    registry = [r for r in plane.records(Topic.REGISTRY) if r[1] == key]
    assert [p for p, _, _ in registry] == [partition_for(subject_key(TENANT, USER), PARTITIONS)]


def test_create_of_live_id_conflicts_and_a_cancelled_id_becomes_the_next_version(
    plane: Plane,
) -> None:
    plane.grant("ci.pipeline")
    assert plane.send(CommandVerb.CREATE, definition=definition()).ok
    again = plane.send(CommandVerb.CREATE, definition=definition())
    assert again.error is not None and again.error.code is ResultCode.CONFLICT
    assert plane.send(CommandVerb.CANCEL, watcher_id="build-failed").ok
    reused = plane.send(CommandVerb.CREATE, definition=definition())
    assert reused.ok and reused.result is not None
    assert (reused.result["version"], reused.result["status"]) == (2, "active")


def test_update_with_a_stale_revision_is_refused_and_a_source_move_tombstones_the_old_partition(
    plane: Plane,
) -> None:
    first, other = sources_on_distinct_partitions()
    plane.grant(first, other)
    created = plane.send(CommandVerb.CREATE, definition=definition(source_id=first))
    assert created.ok and created.result is not None
    revision = created.result["revision"]
    moved = plane.send(
        CommandVerb.UPDATE, definition=definition(source_id=other), expected_revision=revision
    )
    assert moved.ok and moved.result is not None
    assert (moved.result["version"], moved.result["source_id"]) == (2, other)
    stale = plane.send(
        CommandVerb.UPDATE, definition=definition(source_id=first), expected_revision=revision
    )
    assert stale.error is not None and stale.error.code is ResultCode.STALE_REVISION

    key = watcher_key(TENANT, USER, "build-failed")
    writes = [(p, v is None) for p, k, v in plane.records(Topic.WATCHERS) if k == key]
    old, new = partition_for(first, PARTITIONS), partition_for(other, PARTITIONS)
    assert sorted(writes) == sorted([(old, False), (old, True), (new, False)])
    versions = [v["version"] for _, k, v in plane.records(Topic.DEFINITION_LOG) if v and k == key]
    assert versions == [1, 2]


def test_pause_resume_cancel_move_the_lifecycle_and_a_closed_watcher_refuses_resume(
    plane: Plane,
) -> None:
    plane.grant("ci.pipeline")
    assert plane.send(CommandVerb.CREATE, definition=definition()).ok
    for verb in (CommandVerb.PAUSE, CommandVerb.RESUME, CommandVerb.CANCEL):
        assert plane.send(verb, watcher_id="build-failed").ok
    late = plane.send(CommandVerb.RESUME, watcher_id="build-failed")
    assert late.error is not None and late.error.code is ResultCode.CONFLICT

    key = watcher_key(TENANT, USER, "build-failed")
    statuses = [v["status"] for _, k, v in plane.records(Topic.LIFECYCLE) if v and k == key]
    assert statuses == ["active", "paused", "active", "cancelled"]
    shown = plane.send(CommandVerb.SHOW, watcher_id="build-failed")
    assert shown.result is not None
    assert (shown.result["status"], shown.result["closed_reason"]) == ("cancelled", "cancelled")
    listed = plane.send(CommandVerb.LIST)
    assert listed.result == {"watchers": []}


def test_grant_add_list_revoke_round_trip_gates_create(plane: Plane) -> None:
    denied = plane.send(CommandVerb.CREATE, definition=definition())
    assert denied.error is not None and denied.error.code is ResultCode.DENIED
    grant_id = plane.grant("ci.pipeline")
    listed = plane.send(CommandVerb.GRANT_LIST)
    assert listed.result is not None
    assert [g["grant_id"] for g in listed.result["grants"]] == [grant_id]
    assert plane.send(CommandVerb.GRANT_REVOKE, grant_id=grant_id).ok
    assert read_table(plane.bootstrap, plane.topic(Topic.GRANTS)) == {}
    after = plane.send(CommandVerb.CREATE, definition=definition())
    assert after.error is not None and after.error.code is ResultCode.DENIED
    gone = plane.send(CommandVerb.GRANT_REVOKE, grant_id=grant_id)
    assert gone.error is not None and gone.error.code is ResultCode.NOT_FOUND


def test_undecodable_command_is_dead_lettered_and_the_next_one_is_answered(
    plane: Plane, produce_raw: Callable[[Plane, bytes, str], None]
) -> None:
    produce_raw(plane, b"not avro", TENANT)
    plane.grant("ci.pipeline")
    assert plane.send(CommandVerb.CREATE, definition=definition()).ok
    letters = read_all(plane.bootstrap, plane.topic(Topic.DEAD_LETTER))
    assert [m.value() for m in letters] == [b"not avro"]


@pytest.fixture
def produce_raw() -> Callable[[Plane, bytes, str], None]:
    """Produce raw bytes to ``commands`` under the subject key of ``(tenant, USER)``."""

    def produce(plane: Plane, value: bytes, tenant: str = TENANT) -> None:
        key = subject_key(tenant, USER)
        producer = Producer(producer_config(plane.bootstrap))
        producer.produce(plane.topic(Topic.COMMANDS), value, key, partition_for(key, PARTITIONS))
        assert producer.flush(10) == 0

    return produce


def test_a_restarted_processor_restores_registry_and_grants_from_their_topics(
    plane: Plane,
) -> None:
    plane.grant("ci.pipeline")
    created = plane.send(CommandVerb.CREATE, definition=definition())
    assert created.ok
    plane.restart()
    again = plane.send(CommandVerb.CREATE, definition=definition())
    assert again.error is not None and again.error.code is ResultCode.CONFLICT
    paused = plane.send(CommandVerb.PAUSE, watcher_id="build-failed", expected_revision=1)
    assert paused.ok and paused.result is not None and paused.result["revision"] == 2
    second = plane.send(CommandVerb.CREATE, definition=definition("second"))
    assert second.ok, second.error


def test_a_command_keyed_by_another_subject_is_answered_invalid(
    plane: Plane, produce_raw: Callable[[Plane, bytes, str], None]
) -> None:
    principal = operator_principal("local", "ops")
    command = plane.client.command(CommandVerb.LIST, principal, TENANT, USER)
    produce_raw(plane, encode_command(default_codec(), plane.ring(), command), "other")
    answers = plane.wait_for(Topic.COMMAND_RESULTS, command.request_id)
    results = [result_from_value(v, plane.ring()) for v in answers]
    assert [(r.ok, r.error.code, r.error.field) for r in results if r.error] == [
        (False, ResultCode.INVALID, "key")
    ]


def test_concurrent_sends_through_one_client_each_get_their_own_result(plane: Plane) -> None:
    plane.grant("ci.pipeline")
    ids = [f"w-{n}" for n in range(6)]
    results: dict[str, CommandResult] = {}

    def create(watcher_id: str) -> None:
        results[watcher_id] = plane.send(CommandVerb.CREATE, definition=definition(watcher_id))

    threads = [threading.Thread(target=create, args=(watcher_id,)) for watcher_id in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(results) == ids
    assert all(r.ok and r.result and r.result["watcher_id"] == w for w, r in results.items())


# --- immediate sends and agents' schedules (DESIGN.md §2, §10) ------------------------------


def _control_grant(plane: Plane, *chats: str) -> None:
    request_id, spec = daemon_grant(TENANT, USER, chats)
    principal = operator_principal("local", "ops")
    command = plane.client.command(CommandVerb.GRANT_ADD, principal, TENANT, USER, grant=spec)
    result = plane.client.send(command.model_copy(update={"request_id": request_id}))
    assert result.ok, result.error


def test_send_writes_its_outbox_entry_on_the_partition_of_its_delivery_key(plane: Plane) -> None:
    denied = plane.send(CommandVerb.SEND, target="me", text="too early")
    assert denied.error is not None and denied.error.code is ResultCode.DENIED
    _control_grant(plane, "me")
    sent = plane.send(CommandVerb.SEND, target="me", text="deploy finished")
    assert sent.ok and sent.result is not None, sent.error
    key = sent.result["delivery_key"]
    answer = plane.send(CommandVerb.SEND, target="me", text="42", answer_to="prompt-1")
    assert answer.ok and answer.result is not None, answer.error
    prompt_key = request_delivery_key(
        tenant_id=TENANT, user_id=USER, verb="prompt", request_id="prompt-1"
    )
    assert answer.result["delivery_key"] == derived_delivery_key(prompt_key, "answer")

    outbox = [
        (msg.partition(), (msg.key() or b"").decode(), msg.value())
        for msg in read_all(plane.bootstrap, plane.topic(Topic.OUTBOX))
    ]
    assert sorted((p, k) for p, k, _ in outbox) == sorted(
        (partition_for(k, PARTITIONS), k) for k in (key, answer.result["delivery_key"])
    )
    ring = plane.ring()
    entries = {k: decode_outbox_entry(default_codec(), ring, v or b"") for _, k, v in outbox}
    assert (entries[key].verb, entries[key].target, entries[key].text) == (
        "send",
        "me",
        "deploy finished",
    )
    assert entries[key].trigger["request_id"] == sent.result["request_id"]


def test_an_agents_schedule_is_accepted_logged_as_the_agents_and_its_alone_to_cancel(
    plane: Plane,
) -> None:
    _control_grant(plane, "me")
    agent = Principal(
        name="agent:run-1", role=Role.AGENT, tenant_id=TENANT, user_id=USER, session_id="run-1"
    )
    other = agent.model_copy(update={"name": "agent:run-2", "session_id": "run-2"})
    body = {
        "watcher_id": "schedule:me:later",
        "purpose": "control.chat",
        "source": {"kind": "schedule", "at": "2099-01-01T00:00:00Z"},
        "delivery": {"target": "me", "verb": "send", "text": "later"},
    }
    as_create = plane.client.send(
        plane.client.command(CommandVerb.CREATE, agent, TENANT, USER, definition=body)
    )
    assert as_create.error is not None and as_create.error.code is ResultCode.DENIED
    created = plane.client.send(
        plane.client.command(CommandVerb.SCHEDULE, agent, TENANT, USER, definition=body)
    )
    assert created.ok, created.error
    assert created.result is not None and created.result["session_id"] == "run-1"
    key = watcher_key(TENANT, USER, "schedule:me:later")
    [logged] = [v for _, k, v in plane.records(Topic.DEFINITION_LOG) if v and k == key]
    assert (logged["principal"], logged["role"]) == ("agent:run-1", "agent")
    theirs = plane.client.command(
        CommandVerb.CANCEL, other, TENANT, USER, watcher_id="schedule:me:later"
    )
    refused = plane.client.send(theirs)
    assert refused.error is not None and refused.error.code is ResultCode.NOT_FOUND
    mine = plane.client.command(
        CommandVerb.CANCEL, agent, TENANT, USER, watcher_id="schedule:me:later"
    )
    cancelled = plane.client.send(mine)
    assert cancelled.ok, cancelled.error


def test_a_client_waiting_out_a_stopped_processor_gets_the_one_answer_on_a_retry(
    plane: Plane,
) -> None:
    plane.running.stop()
    impatient = CommandClient(plane.bootstrap, plane.topology, timeout_s=2)
    command = impatient.command(
        CommandVerb.GRANT_LIST, operator_principal("local", "ops"), TENANT, USER
    )
    answers: list[CommandResult] = []
    waiting = threading.Thread(target=lambda: answers.append(impatient.send(command, retries=20)))
    waiting.start()
    time.sleep(3)  # longer than one wait: the client is on a retry when the processor is back
    assert waiting.is_alive()
    plane.running = Running(plane.bootstrap, plane.topology)
    waiting.join(60)
    impatient.close()
    assert len(answers) == 1 and answers[0].ok, answers
    results = [k for _, k, _ in plane.records(Topic.COMMAND_RESULTS) if k == command.request_id]
    assert results == [command.request_id]  # applied once: the command was produced once


# A transaction timeout of one second (its batch budget a third of that): 200 commands of 40 ms
# each cannot fit one transaction, nor even 25 of them.
SHORT_TRANSACTIONS: Final = {"transaction.timeout.ms": 1000, "message.timeout.ms": 900}


@pytest.fixture
def slow_plane(kafka_bootstrap: str) -> Iterator[Plane]:
    """A plane whose processor takes 40 ms per command under one-second transactions."""
    topology = Topology(fresh("t-cmd") + ".", PARTITIONS)
    ensure_topics(connect_admin(kafka_bootstrap), topology)
    client = CommandClient(kafka_bootstrap, topology, timeout_s=30)
    running = Running(kafka_bootstrap, topology, slow_s=0.04, producer_overrides=SHORT_TRANSACTIONS)
    found = Plane(topology, client, kafka_bootstrap, running)
    try:
        yield found
    finally:
        client.close()
        found.running.stop()


def burst(plane: Plane, count: int) -> list[str]:
    """``count`` ``key`` commands, one per subject, produced at once (one batch for the
    processor); their request ids."""
    codec, ring = default_codec(), plane.ring()
    producer = Producer(producer_config(plane.bootstrap))
    ids = []
    for n in range(count):
        user = f"burst-{n}"
        principal = operator_principal(TENANT, user)
        command = plane.client.command(CommandVerb.KEY, principal, TENANT, user)
        key = command.subject_key
        value = encode_command(codec, ring, command)
        producer.produce(plane.topic(Topic.COMMANDS), value, key, partition_for(key, PARTITIONS))
        ids.append(command.request_id)
    assert producer.flush(30) == 0
    return ids


def answers(plane: Plane, ids: list[str], seconds: float = 90) -> Counter[str]:
    """How many committed results each of ``ids`` has, once each has one (or time is up)."""
    wanted = set(ids)
    deadline = time.monotonic() + seconds
    while True:
        got = Counter(k for _, k, _ in plane.records(Topic.COMMAND_RESULTS) if k in wanted)
        if len(got) == len(wanted) or time.monotonic() > deadline:
            return got
        assert not plane.running.failures, plane.running.failures
        time.sleep(0.5)


def test_a_batch_too_slow_for_one_transaction_commits_in_slices_each_command_answered_once(
    slow_plane: Plane,
) -> None:
    """200 commands × 40 ms in one batch against a one-second transaction timeout: without the
    cut the coordinator aborts the transaction, fences the producer and the batch is redone
    forever (the processor used to die of it). Cut at the budget, it commits in slices."""
    ids = burst(slow_plane, 200)
    got = answers(slow_plane, ids)
    app = slow_plane.running.processor.app
    cuts = slow_plane.running.metrics.get_sample_value(
        "vigil_runtime_batches_cut_total", {"group": app.group_id}
    )
    assert len(got) == 200 and set(got.values()) == {1}
    assert cuts is not None and cuts >= 2
    assert app.transaction().aborts == 0  # never fenced, nothing redone


def test_a_fenced_processor_resyncs_and_answers_every_command_once(slow_plane: Plane) -> None:
    """A second producer with the processor's transactional id fences it mid-stream (a
    zombie's view): every produce after that is refused with ``_FATAL``, which once stopped
    the processor. It must rebuild its producer and answer each command exactly once."""
    first = burst(slow_plane, 5)
    assert set(answers(slow_plane, first).values()) == {1}
    app = slow_plane.running.processor.app
    rival = Producer(
        producer_config(slow_plane.bootstrap, transactional_id=f"{app.group_id}-{app.instance_id}")
    )
    rival.init_transactions(30)
    ids = burst(slow_plane, 40)
    got = answers(slow_plane, ids)
    assert len(got) == 40 and set(got.values()) == {1}
    assert app.transaction().aborts >= 1  # it was fenced, and rebuilt
    assert slow_plane.running.alive and not slow_plane.running.failures
