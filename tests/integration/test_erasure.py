"""Erasure that reaches every log (DESIGN.md §10 "Erasure's reach", "Cancel and erase reach every
owner"), on the whole pipeline: command processor, evaluator, ticker and delivery on one broker.

A subject with events, receipts, poll ticks, in-app notifications, schedules, an immediate send
and a dead letter is erased; right away a raw scan of every vigil topic but ``events`` finds none
of its marker strings, not one of its sealed values opens with the keys that remain, and every
read path (API ledger and evaluations, show/list, explain, replay) says erased or shows nothing —
while another subject on the same partitions reads as before. Cancel shreds one watcher's
evidence and leaves its siblings. KEK rotation keeps old records readable and wraps new keys
under the new KEK.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from consumers.commands.loop import CommandDeps, CommandProcessor, CommandSettings
from pipeline.control.client import CommandClient, operator_principal
from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.ops.explain import read_explanation
from pipeline.records.data_key import decode_data_key
from pipeline.records.definition_log import decode_definition_log
from pipeline.rules.authz import Action
from pipeline.rules.commands import CommandVerb, GrantSpec, ResultCode
from pipeline.rules.data_keys import KeyOwner
from pipeline.rules.errors import SerdeError
from pipeline.rules.replay import replay
from pipeline.rules.replay_model import SkipReason
from pipeline.runtime.keys import read_keys
from tests.integration.erasure_stack import FAST_GROUP, Stack, same_partition_user
from tests.integration.runtime_helpers import header_pairs, read_all
from tests.names import fresh
from tests.receiver import Receiver

pytestmark = pytest.mark.integration

TENANT = "acme"
CODEC = default_codec()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        running.fail(1000, 410)  # every webhook delivery is terminal at once: a dead letter
        yield running


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, redis_url: str, receiver: Receiver) -> Iterator[Stack]:
    running = Stack(kafka_bootstrap, redis_url, receiver)
    try:
        yield running
    finally:
        running.close()


def markers(who: str) -> dict[str, str]:
    """Strings that exist nowhere but in this subject's data."""
    tag = uuid.uuid4().hex[:12]
    names = ("definition", "event", "tick", "schedule", "dead", "send")
    return {name: f"{who}mark-{name}-{tag}" for name in names}


def event_watcher(watcher_id: str, event_type: str, wanted: str) -> dict[str, Any]:
    return {
        "watcher_id": watcher_id,
        "purpose": "ops.alert",
        "source": {
            "kind": "event",
            "source_id": "shared.src",
            "event_type": event_type,
            "max_age": "10m",
        },
        "condition": {"eq": ["status", wanted]},
        "delivery": {"target": "inbox", "verb": "notify"},
        "expires_at": "2030-01-01T00:00:00Z",
        "privacy": {"retain_paths": ["status", "note"]},
    }


def poll_watcher(watcher_id: str, wanted: str) -> dict[str, Any]:
    return {
        "watcher_id": watcher_id,
        "purpose": "ops.alert",
        "source": {
            "kind": "polling",
            "source_id": "poll.src",
            "tool": "http.json@v1",
            "tool_ref": "status-page",
            "cron": "* * * * *",
            "timezone": "UTC",
            "missed": "latest",
            "max_age": "10m",
        },
        "condition": {"eq": ["state", wanted]},
        "delivery": {"target": "inbox", "verb": "notify"},
        "expires_at": "2030-01-01T00:00:00Z",
        "privacy": {"retain_paths": ["state"]},
    }


def schedule(name: str, at: datetime, target: str, text: str) -> dict[str, Any]:
    return {
        "watcher_id": f"schedule:me:{name}",
        "purpose": "control.chat",
        "source": {"kind": "schedule", "at": at.isoformat().replace("+00:00", "Z")},
        "delivery": {"target": target, "verb": "send", "text": text},
    }


def raw_records(stack: Stack, topic: Topic) -> list[tuple[bytes, bytes, bytes]]:
    """(key, value, headers) of every record in the log, aborted transactions' included."""
    out = []
    for msg in read_all(stack.bootstrap, stack.topology.name(topic), committed=False):
        headers = b"".join(name.encode() + _raw(value) for name, value in header_pairs(msg))
        out.append((msg.key() or b"", msg.value() or b"", headers))
    return out


def _raw(value: str | bytes | None) -> bytes:
    return value.encode() if isinstance(value, str) else value or b""


def sealed_values(stack: Stack) -> list[tuple[Topic, bytes]]:
    """Every sealed field in every vigil topic but ``events``."""
    found: list[tuple[Topic, bytes]] = []
    for topic in Topic:
        if topic in (Topic.EVENTS, Topic.KEYS):
            continue
        for _key, value, _headers in raw_records(stack, topic):
            if not value:
                continue
            try:
                _, decoded = CODEC.decode(value)
            except SerdeError:
                continue
            sealed = decoded.get("sealed")
            if sealed:
                found.append((topic, bytes(sealed)))
    return found


def test_erasure_leaves_no_plaintext_and_nothing_readable_and_spares_the_other_subject(
    stack: Stack, receiver: Receiver
) -> None:
    victim = f"v-{uuid.uuid4().hex[:6]}"
    survivor = same_partition_user(TENANT, victim, f"s-{uuid.uuid4().hex[:6]}")
    v, s = markers("v"), markers("s")
    start = stack.clock.now()
    for user, mark, prefix in ((victim, v, "v"), (survivor, s, "s")):
        stack.grants(TENANT, user)
        stack.ok(CommandVerb.CREATE, TENANT, user, definition=event_watcher(
            f"w-{prefix}", f"type.{prefix}", mark["definition"]))  # fmt: skip
        stack.ok(CommandVerb.CREATE, TENANT, user, definition=schedule(
            "note", start + timedelta(seconds=5), "inbox", mark["schedule"]))  # fmt: skip
        stack.ok(CommandVerb.SEND, TENANT, user, target="me", text=mark["send"])
    stack.ok(CommandVerb.CREATE, TENANT, victim, definition=poll_watcher("w-poll", v["tick"]))
    stack.ok(CommandVerb.CREATE, TENANT, victim, definition=schedule(
        "dead", start + timedelta(seconds=5), "hook", v["dead"]))  # fmt: skip
    stack.tool_answer = {"state": v["tick"]}
    for prefix, mark in (("v", v), ("s", s)):
        stack.publish("shared.src", f"type.{prefix}", f"e-{prefix}", {
            "status": mark["definition"], "note": mark["event"]})  # fmt: skip
    # Past the next whole minute (the poll is due) and past both schedules.
    stack.clock.set(start.replace(second=0) + timedelta(minutes=1, seconds=10))

    def notes(user: str) -> list[dict[str, Any]]:
        return stack.ledger.notifications(TENANT, user)[0]

    stack.wait("the victim's three notifications", lambda: len(notes(victim)) == 3)
    stack.wait("the survivor's two notifications", lambda: len(notes(survivor)) == 2)
    stack.wait("the dead letter", lambda: raw_records(stack, Topic.DEAD_LETTER))
    stack.wait("both sends", lambda: v["send"] in stack.console.getvalue()
               and s["send"] in stack.console.getvalue())  # fmt: skip
    assert v["schedule"] in [n["text"] for n in notes(victim)]
    polled, _ = stack.ledger.evaluations(TENANT, victim, "w-poll", "poll.src", 10)
    assert any(e["payload"] == {"state": v["tick"]} for e in polled), "readable before erasure"
    before = stack.ring()
    assert before.owners(TENANT, victim) and before.owners(TENANT, survivor)

    erased = stack.ok(CommandVerb.ERASE, TENANT, victim)
    assert erased["erased"] == 4 and erased["grants_revoked"] == 2
    assert erased["keys_shredded"] == 5, "the subject's key and four watcher versions' keys"

    # Right away: no plaintext marker anywhere but events, and no sealed value of the victim
    # opens with the keys that remain; the survivor's all do.
    for topic in Topic:
        blobs = raw_records(stack, topic)
        text = b"".join(k + val + h for k, val, h in blobs)
        if topic is Topic.EVENTS:
            assert v["event"].encode() in text, "the scan sees markers where they are plain"
            continue
        for marker in (*v.values(), *s.values()):
            assert marker.encode() not in text, f"{marker} in {topic.value}"
    after = stack.ring()
    assert after.owners(TENANT, victim) == []
    seen = {victim: 0, survivor: 0}
    for topic, sealed in sealed_values(stack):
        owner = before.owner_of(sealed)
        if owner is None or owner.user_id not in seen:
            continue
        seen[owner.user_id] += 1
        assert after.can_open(sealed) is (owner.user_id == survivor), (topic, owner)
    assert seen[victim] >= 10 and seen[survivor] >= 5, seen

    # Every read path: erased or nothing for the victim ...
    gone = stack.send(CommandVerb.SHOW, TENANT, victim, watcher_id="w-v")
    assert gone.error is not None and gone.error.code is ResultCode.NOT_FOUND
    refused = stack.send(CommandVerb.LIST, TENANT, victim)
    assert refused.error is not None and refused.error.code is ResultCode.DENIED, "no grant left"
    shown, hidden = stack.ledger.evaluations(TENANT, victim, "w-v", "shared.src", 10)
    assert shown == [] and hidden >= 1
    listed, hidden = stack.ledger.notifications(TENANT, victim)
    assert listed == [] and hidden == 3
    rows = read_explanation(stack.bootstrap, stack.topology, TENANT, victim, "w-poll",
                            keks=stack.keks, now=stack.clock.now())  # fmt: skip
    assert rows and all(row.erased for row in rows)
    assert all(v["tick"] not in str(row.as_json()) for row in rows)
    history = stack.history(TENANT, victim)
    report = replay(history)
    assert report.differences == [] and report.skipped.get(SkipReason.ERASED, 0) >= 2

    # ... and the other subject, on the same partitions, reads as before.
    kept = notes(survivor)
    assert s["schedule"] in [n["text"] for n in kept]
    shown, hidden = stack.ledger.evaluations(TENANT, survivor, "w-s", "shared.src", 10)
    assert hidden == 0
    assert {"status": s["definition"], "note": s["event"]} in [e["payload"] for e in shown]
    view = stack.ok(CommandVerb.SHOW, TENANT, survivor, watcher_id="w-s")
    assert view["definition"]["condition"] == {"eq": ["status", s["definition"]]}
    rows = read_explanation(stack.bootstrap, stack.topology, TENANT, survivor, "w-s",
                            keks=stack.keks, now=stack.clock.now())  # fmt: skip
    assert rows and not any(row.erased for row in rows)

    # Re-granted, the subject lists nothing; re-creating the same watcher id never shows the
    # earlier data.
    stack.grants(TENANT, victim)
    assert stack.ok(CommandVerb.LIST, TENANT, victim)["watchers"] == []
    again = stack.ok(CommandVerb.CREATE, TENANT, victim, definition=event_watcher(
        "w-v", "type.v", v["definition"]))  # fmt: skip
    assert again["version"] == 1
    shown, hidden = stack.ledger.evaluations(TENANT, victim, "w-v", "shared.src", 10)
    assert shown == [] and hidden >= 1


def test_cancel_shreds_that_watchers_receipts_and_leaves_its_siblings(stack: Stack) -> None:
    user = f"c-{uuid.uuid4().hex[:6]}"
    a, b = markers("a"), markers("b")
    stack.grants(TENANT, user)
    stack.ok(CommandVerb.CREATE, TENANT, user, definition=event_watcher(
        "w-a", "type.ca", a["definition"]))  # fmt: skip
    stack.ok(CommandVerb.CREATE, TENANT, user, definition=event_watcher(
        "w-b", "type.cb", b["definition"]))  # fmt: skip
    for kind, mark in (("ca", a), ("cb", b)):
        stack.publish("shared.src", f"type.{kind}", f"e-{kind}-{user}", {
            "status": mark["definition"], "note": mark["event"]})  # fmt: skip

    def evaluations(watcher_id: str) -> tuple[list[dict[str, Any]], int]:
        return stack.ledger.evaluations(TENANT, user, watcher_id, "shared.src", 10)

    stack.wait("both watchers' receipts", lambda: evaluations("w-a")[0] and evaluations("w-b")[0])
    before = stack.ring((TENANT, user))

    cancelled = stack.ok(CommandVerb.CANCEL, TENANT, user, watcher_id="w-a")
    assert (cancelled["status"], cancelled["keys_shredded"]) == ("cancelled", 1)

    shown, hidden = evaluations("w-a")
    assert shown == [] and hidden == 1
    rows = read_explanation(stack.bootstrap, stack.topology, TENANT, user, "w-a",
                            keks=stack.keks, now=stack.clock.now())  # fmt: skip
    assert [row.erased for row in rows] == [True]
    shown, hidden = evaluations("w-b")
    assert hidden == 0 and shown[0]["payload"] == {"status": b["definition"], "note": b["event"]}
    after = stack.ring((TENANT, user))
    assert {o.watcher_id for o in after.owners(TENANT, user)} == {None, "w-b"}
    receipts = [sealed for topic, sealed in sealed_values(stack) if topic is Topic.RECEIPTS]
    owned = [(before.owner_of(x), x) for x in receipts]
    mine = [(o, x) for o, x in owned if o is not None and o.user_id == user]
    assert {o.watcher_id for o, _ in mine} == {"w-a", "w-b"}
    for owner, sealed in mine:
        assert after.can_open(sealed) is (owner.watcher_id == "w-b")
    # The subject's own key stays: its definitions and the cancelled watcher's record read.
    view = stack.ok(CommandVerb.SHOW, TENANT, user, watcher_id="w-a")
    assert view["definition"]["condition"] == {"eq": ["status", a["definition"]]}


# --- KEK rotation ------------------------------------------------------------------------------


def _kek(kek_id: str, fill: bytes) -> str:
    return f"{kek_id}:{base64.urlsafe_b64encode(fill * 32).decode()}"


K1, K2 = _kek("k1", b"1"), _kek("k2", b"2")


class _Processor:
    """A command processor and an operator's client under one set of KEKs."""

    def __init__(self, bootstrap: str, topology: Topology, keks: KeyEncryptionKeys) -> None:
        import threading

        self.processor = CommandProcessor(
            CommandSettings(bootstrap, topology, "rot", consumer_overrides=FAST_GROUP),
            CommandDeps(keks=keks, metrics_registry=CollectorRegistry()),
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.processor.run, args=(self.stop,), daemon=True)
        self.thread.start()
        self.client = CommandClient(bootstrap, topology, timeout_s=60, keks=keks)

    def ok(self, verb: CommandVerb, user: str, **fields: Any) -> dict[str, Any]:
        command = self.client.command(verb, operator_principal("ops", "root"), TENANT, user,
                                      **fields)  # fmt: skip
        result = self.client.send(command)
        assert result.ok and result.result is not None, result.error
        return result.result

    def create(self, user: str, watcher_id: str) -> None:
        spec = GrantSpec(
            tenant_id=TENANT,
            user_id=user,
            purpose="ops.alert",
            sources=("shared.src",),
            targets=("inbox",),
            actions=(Action.MANAGE,),
            until=datetime(2030, 1, 1, tzinfo=UTC),
        )
        self.ok(CommandVerb.GRANT_ADD, user, grant=spec)
        self.ok(CommandVerb.CREATE, user, definition=event_watcher(watcher_id, "t", "x"))

    def close(self) -> None:
        self.client.close()
        self.stop.set()
        self.thread.join(60)


def _kek_ids(bootstrap: str, topology: Topology) -> dict[KeyOwner, str]:
    latest: dict[str, bytes | None] = {}
    for msg in read_all(bootstrap, topology.name(Topic.KEYS)):
        latest[(msg.key() or b"").decode()] = msg.value()
    records = [decode_data_key(CODEC, raw) for raw in latest.values() if raw is not None]
    return {record.owner: record.kek_id for record in records}


def test_kek_rotation_keeps_old_records_readable_and_new_keys_use_the_new_kek(
    kafka_bootstrap: str,
) -> None:
    topology = Topology(fresh("t-rotate") + ".", 2)
    ensure_topics(connect_admin(kafka_bootstrap), topology)
    old_user, new_user = "r-old", "r-new"
    first = _Processor(kafka_bootstrap, topology, KeyEncryptionKeys.parse(K1))
    try:
        first.create(old_user, "w-old")
    finally:
        first.close()
    assert set(_kek_ids(kafka_bootstrap, topology).values()) == {"k1"}

    rotated = _Processor(kafka_bootstrap, topology, KeyEncryptionKeys.parse(f"{K1},{K2}"))
    try:
        # An old record, written before the rotation, reads through the rotated processor.
        view = rotated.ok(CommandVerb.SHOW, old_user, watcher_id="w-old")
        assert view["definition"]["source"]["source_id"] == "shared.src"
        rotated.create(new_user, "w-new")
    finally:
        rotated.close()
    kek_ids = _kek_ids(kafka_bootstrap, topology)
    new_keys = {o: k for o, k in kek_ids.items() if o.user_id == new_user}
    assert new_keys and set(new_keys.values()) == {"k2"}, "new keys under the new KEK"
    old_keys = {o: k for o, k in kek_ids.items() if o.user_id == old_user}
    assert old_keys and set(old_keys.values()) == {"k2"}, "re-wrapped when the subject came by"

    # With the old KEK retired, the pre-rotation definition-log record still opens.
    only_new = KeyRing(KeyEncryptionKeys.parse(K2), CODEC)
    read_keys(kafka_bootstrap, topology, only_new)
    logged = [
        decode_definition_log(CODEC, only_new, msg.value() or b"")
        for msg in read_all(kafka_bootstrap, topology.name(Topic.DEFINITION_LOG))
    ]
    old = [entry for entry in logged if entry.user_id == old_user]
    assert old and all(entry.definition_json is not None for entry in old)
