"""Recovery through replay, end to end on the whole pipeline (DESIGN.md §10 "Authorization failure
and checkpoints"): a grant revoked for a stretch of events, restored, then
``vigil --as-operator replay --watcher W --apply`` delivers the skipped events that match exactly
once; a second ``--apply`` writes and delivers nothing; the dry run (the default) says what
``--apply`` would write and writes nothing; the apply is audited in ``definition-log``; a
non-operator cannot apply."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from pipeline.cli.group import vigil
from pipeline.control.core import user_principal
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic
from pipeline.records.definition_log import decode_definition_log
from pipeline.records.notification import decode_notification
from pipeline.rules.authz import Action
from pipeline.rules.commands import CommandVerb, GrantSpec, ResultCode
from tests.integration.erasure_stack import PARTITIONS, Stack
from tests.integration.runtime_helpers import read_all
from tests.integration.test_erasure import event_watcher
from tests.receiver import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CODEC = default_codec()
TYPE = "build.finished"


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, redis_url: str) -> Iterator[Stack]:
    with Receiver() as receiver:
        running = Stack(kafka_bootstrap, redis_url, receiver, name="recover")
        try:
            yield running
        finally:
            running.close()


def _grant(stack: Stack, tenant: str, user: str) -> str:
    spec = GrantSpec(
        tenant_id=tenant,
        user_id=user,
        purpose="ops.alert",
        sources=("shared.src",),
        targets=("inbox",),
        actions=(Action.EVALUATE, Action.DELIVER, Action.MANAGE),
        until=datetime(2030, 1, 1, tzinfo=UTC),
    )
    return str(stack.ok(CommandVerb.GRANT_ADD, tenant, user, grant=spec)["grant_id"])


def _config(stack: Stack, tmp_path: Path, tenant: str, user: str) -> Path:
    path = tmp_path / "vigil.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{stack.bootstrap}"\n'
        f'topic_prefix = "{stack.topology.prefix}"\npartitions = {PARTITIONS}\n\n'
        f'[subject]\ntenant_id = "{tenant}"\nuser_id = "{user}"\n\n[operator]\nname = "op-ann"\n',
        encoding="utf-8",
    )
    return path


def _cli(config: Path, *args: str) -> Result:
    return CliRunner().invoke(vigil, ["--config", str(config), *args])


def _deliveries(stack: Stack, tenant: str, user: str, watcher_id: str) -> Counter[str]:
    """In-app ledger records per delivery key (not deduplicated: a repeat would count twice)."""
    ring = stack.ring((tenant, user))
    found: Counter[str] = Counter()
    for msg in read_all(stack.bootstrap, stack.topology.name(Topic.NOTIFICATIONS)):
        raw = msg.value()
        if raw is None:
            continue
        value = decode_notification(CODEC, ring, raw)
        if value["watcher_id"] == watcher_id and value["kind"] == "notification":
            found[value["delivery_key"]] += 1
    return found


def _receipts(stack: Stack, tenant: str, user: str, watcher_id: str) -> list[dict[str, Any]]:
    found, _ = stack.ledger.evaluations(tenant, user, watcher_id, "shared.src", 1000)
    return found


def _publish(stack: Stack, event_id: str, status: str) -> None:
    stack.publish("shared.src", TYPE, event_id, {"status": status})


def test_a_revoked_stretch_is_recovered_once_and_a_second_apply_delivers_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    tenant, user, watcher = f"t{uuid.uuid4().hex[:8]}", "u-rec", "build-broke"
    config = _config(stack, tmp_path, tenant, user)
    first_grant = _grant(stack, tenant, user)
    stack.ok(CommandVerb.CREATE, tenant, user, definition=event_watcher(watcher, TYPE, "failed"))
    _publish(stack, "b-1", "failed")
    stack.wait("b-1 delivered", lambda: len(_deliveries(stack, tenant, user, watcher)) == 1)

    since = datetime.now(UTC) - timedelta(seconds=1)
    stack.ok(CommandVerb.GRANT_REVOKE, tenant, user, grant_id=first_grant)
    for event_id, status in (("b-2", "failed"), ("b-3", "passed"), ("b-4", "failed")):
        _publish(stack, event_id, status)

    def denied() -> bool:
        reasons = [r["reason"] for r in _receipts(stack, tenant, user, watcher)]
        return reasons.count("authorization_denied") == 3

    stack.wait("three denied evaluations", denied)
    _grant(stack, tenant, user)
    _publish(stack, "b-5", "failed")
    stack.wait("b-5 delivered", lambda: len(_deliveries(stack, tenant, user, watcher)) == 2)

    frm = since.isoformat().replace("+00:00", "Z")
    dry = _cli(config, "replay", "--watcher", watcher, "--from", frm, "--json")
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.stdout)["recovery"]
    assert plan["dry_run"] is True and plan["applied"] is None
    assert sorted(row["trigger"]["event_id"] for row in plan["would_write"]) == [
        "b-2",
        "b-3",
        "b-4",
    ]
    firing = {row["trigger"]["event_id"]: row["delivery_key"] for row in plan["would_write"]}
    assert firing["b-3"] is None and firing["b-2"] and firing["b-4"]
    time.sleep(1.0)  # a dry run that wrote would show by now
    assert len(_deliveries(stack, tenant, user, watcher)) == 2, "the dry run wrote nothing"

    applied = _cli(config, "--as-operator", "replay", "--watcher", watcher, "--from", frm,
                   "--apply", "--json")  # fmt: skip
    assert applied.exit_code == 0, applied.output
    result = json.loads(applied.stdout)["recovery"]["applied"]
    assert (result["receipts"], result["outbox_entries"]) == (3, 2)
    want = {firing["b-2"], firing["b-4"]}
    stack.wait(
        "b-2 and b-4 delivered",
        lambda: want <= set(_deliveries(stack, tenant, user, watcher)),
    )

    again = _cli(config, "--as-operator", "replay", "--watcher", watcher, "--from", frm,
                 "--apply", "--json")  # fmt: skip
    assert again.exit_code == 0, again.output
    second = json.loads(again.stdout)["recovery"]
    assert second["would_write"] == [] and second["applied"] is None
    assert second["left"]["recovered_before"] == 3
    time.sleep(2.0)  # a repeat delivery would show by now
    counts = _deliveries(stack, tenant, user, watcher)
    assert len(counts) == 4 and set(counts.values()) == {1}, counts

    plain = _cli(config, "replay", "--watcher", watcher, "--json")
    assert plain.exit_code == 0, plain.output
    assert json.loads(plain.stdout)["difference_count"] == 0
    audits = [
        entry
        for msg in read_all(stack.bootstrap, stack.topology.name(Topic.DEFINITION_LOG))
        if msg.value() is not None
        and (entry := decode_definition_log(CODEC, stack.ring(), msg.value() or b"")).note
        and entry.watcher_id == watcher
    ]
    assert len(audits) == 1, "one apply wrote, one audit"
    assert audits[0].note is not None and "op-ann" in audits[0].note


def test_a_non_operator_cannot_apply_a_replay(stack: Stack, tmp_path: Path) -> None:
    tenant, user, watcher = f"t{uuid.uuid4().hex[:8]}", "u-not", "not-mine-to-apply"
    config = _config(stack, tmp_path, tenant, user)
    _grant(stack, tenant, user)
    stack.ok(CommandVerb.CREATE, tenant, user, definition=event_watcher(watcher, TYPE, "failed"))

    refused = _cli(config, "replay", "--watcher", watcher, "--apply")
    assert refused.exit_code == 2 and "operator action" in refused.output

    owner = user_principal(tenant, user)
    client = stack.client
    result = client.send(
        client.command(CommandVerb.REPLAY_APPLY, owner, tenant, user, watcher_id=watcher)
    )
    assert result.error is not None and result.error.code is ResultCode.DENIED
