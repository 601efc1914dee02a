"""Redelivery end to end (DESIGN.md §9): a webhook answers 410, the delivery is a dead letter
(``GET /v1/deliveries?state=dead``), the receiver recovers, ``POST …:redeliver`` is a command
through the command processor, and delivery sends the entry again — same ``Idempotency-Key``, a
fresh attempt count. On the real stack: broker, Redis, command processor, evaluator, delivery,
the API app and a local webhook receiver.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from pipeline.cli.group import vigil
from pipeline.rules.commands import CommandVerb
from tests.integration.console_stack import (
    TENANT,
    USER,
    ConsoleStack,
    console_stack,
    event_watcher,
)
from tests.integration.erasure_stack import PARTITIONS
from tests.receiver import Receiver

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, redis_url: str, receiver: Receiver) -> Iterator[ConsoleStack]:
    with console_stack(kafka_bootstrap, redis_url, receiver) as running:
        running.grants(TENANT, USER)
        yield running


def _dead_letter(stack: ConsoleStack, receiver: Receiver, watcher_id: str) -> dict[str, Any]:
    """A fresh watcher's first delivery, answered 410 by the receiver: its dead letter."""
    event_type = f"build.{uuid.uuid4().hex[:8]}"
    definition = event_watcher(watcher_id, event_type)
    stack.ok(CommandVerb.CREATE, TENANT, USER, definition=definition)
    receiver.fail(1, 410)
    stack.publish("shared.src", event_type, f"e-{watcher_id}", {"status": "failed"})

    def dead() -> list[dict[str, Any]]:
        answer = stack.call("GET", f"/v1/deliveries?state=dead&watcher_id={watcher_id}")
        assert answer.status_code == 200, answer.text
        return list(answer.json()["deliveries"])

    (found,) = stack.wait("the dead letter", dead)
    return found


def test_a_dead_letter_is_redelivered_after_the_receiver_recovers_under_the_same_key(
    stack: ConsoleStack, receiver: Receiver
) -> None:
    dead = _dead_letter(stack, receiver, "w-redeliver")
    key = dead["delivery_key"]
    assert (dead["state"], dead["last_error"], dead["attempts"]) == ("dead_letter", "http_410", 1)
    assert dead["redeliverable"] and dead["redeliveries"] == 0
    first = [r for r in receiver.requests if r.idempotency_key == key]
    assert [r.status for r in first] == [410]

    answer = stack.call("POST", f"/v1/deliveries/{key}:redeliver")
    assert answer.status_code == 202, answer.text
    assert answer.json()["requested"] is True

    def delivered() -> dict[str, Any] | None:
        view = stack.call("GET", f"/v1/deliveries/{key}").json()
        return view if view["state"] == "delivered" else None

    view = stack.wait("the redelivery", delivered)
    assert (view["attempts"], view["redeliveries"], view["last_error"]) == (1, 1, None)
    sent = [r for r in receiver.requests if r.idempotency_key == key]
    assert [r.status for r in sent] == [410, 200], "one more request, under the same key"
    assert sent[1].json()["delivery_key"] == key
    again = stack.call("POST", f"/v1/deliveries/{key}:redeliver")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"


def test_deliveries_are_tenant_scoped_and_agents_neither_read_nor_redeliver(
    stack: ConsoleStack, receiver: Receiver
) -> None:
    dead = _dead_letter(stack, receiver, "w-scoped")
    key = dead["delivery_key"]
    for path in (f"/v1/deliveries/{key}",):
        assert stack.call("GET", path, "stranger").status_code == 404
    refused = stack.call("POST", f"/v1/deliveries/{key}:redeliver", "stranger")
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    listed = stack.call("GET", "/v1/deliveries", "stranger")
    assert listed.status_code == 403, "no grant covers the stranger's subject: nothing to read"
    for who in ("agent", "chat"):
        assert stack.call("GET", "/v1/deliveries", who).status_code == 403
        answer = stack.call("POST", f"/v1/deliveries/{key}:redeliver", who)
        assert answer.status_code == 403, answer.text
    manager = stack.call("GET", f"/v1/deliveries/{key}?user_id={USER}", "manager")
    assert manager.status_code == 200 and manager.json()["state"] == "dead_letter"
    assert stack.call("GET", f"/v1/deliveries/{'0' * 64}").status_code == 404
    assert stack.call("GET", "/v1/deliveries?state=nope").status_code == 422


def test_vigil_deliveries_lists_shows_and_redelivers_a_dead_letter(
    stack: ConsoleStack, receiver: Receiver, tmp_path: Path
) -> None:
    dead = _dead_letter(stack, receiver, "w-cli")
    key = dead["delivery_key"]
    config = tmp_path / "vigil.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{stack.bootstrap}"\n'
        f'topic_prefix = "{stack.topology.prefix}"\npartitions = {PARTITIONS}\n\n'
        f'[subject]\ntenant_id = "{TENANT}"\nuser_id = "{USER}"\n',
        encoding="utf-8",
    )

    def cli(*args: str) -> Result:
        return CliRunner().invoke(vigil, ["--config", str(config), "deliveries", *args])

    listed = cli("list", "--state", "dead", "--watcher", "w-cli", "--json")
    assert listed.exit_code == 0, listed.output
    assert [d["delivery_key"] for d in json.loads(listed.output)["deliveries"]] == [key]
    shown = cli("show", key)
    assert shown.exit_code == 0 and "state: dead_letter" in shown.output
    assert "last_error: http_410" in shown.output
    done = cli("redeliver", key)
    assert done.exit_code == 0, done.output
    assert f"redelivery of {key} requested" in done.output

    def delivered() -> bool:
        shown = cli("show", key, "--json")
        assert shown.exit_code == 0, shown.output
        return bool(json.loads(shown.output)["state"] == "delivered")

    stack.wait("the redelivery", delivered)
    assert [r.status for r in receiver.requests if r.idempotency_key == key] == [410, 200]
    refused = cli("redeliver", key)
    assert refused.exit_code == 1 and "[conflict]" in refused.output
    missing = cli("show", "0" * 64)
    assert missing.exit_code == 1 and "[not_found]" in missing.output
