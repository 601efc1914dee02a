"""Message templates through the whole pipeline (issue 31 item 1): the command processor refuses a
template naming a leaf the privacy allowlist does not keep; the evaluator renders the template
into each outbox entry; the delivery worker sends that one text to a Telegram-shaped chat, in the
webhook body beside its structured fields and into the in-app ledger; a watcher without a
template gets the default message of what its receipt keeps; replay renders every message again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from pipeline.rules.authz import Action
from pipeline.rules.commands import CommandVerb, GrantSpec, ResultCode
from pipeline.rules.instants import rfc3339_seconds
from pipeline.rules.replay import replay
from tests.integration.console_stack import event_watcher
from tests.integration.erasure_stack import BOT_TOKEN, Stack
from tests.receiver import Receiver

pytestmark = pytest.mark.integration

TENANT, USER = "acme", "u-messages"
TEMPLATE = "Build {event_id} failed on {payload.branch}"
AUTHOR = "ann-private@example.com"  # a leaf no allowlist keeps: it must never be shown


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver(bot_token=BOT_TOKEN) as running:
        yield running


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, redis_url: str, receiver: Receiver) -> Iterator[Stack]:
    running = Stack(kafka_bootstrap, redis_url, receiver, name="messages")
    try:
        yield running
    finally:
        running.close()


def watcher(watcher_id: str, target: str, message: str | None = None) -> dict[str, Any]:
    body = event_watcher(watcher_id, "build.finished", target=target)
    body["privacy"] = {"retain_paths": ["status", "branch"]}
    if message is not None:
        body["delivery"]["message"] = message
    return body


def _grant_the_chat(stack: Stack) -> None:
    spec = GrantSpec(
        tenant_id=TENANT,
        user_id=USER,
        purpose="ops.alert",
        sources=("shared.src",),
        targets=("phone",),
        actions=(Action.EVALUATE, Action.DELIVER, Action.MANAGE),
        until=datetime(2030, 1, 1, tzinfo=UTC),
    )
    stack.ok(CommandVerb.GRANT_ADD, TENANT, USER, grant=spec)


def _notifications(stack: Stack, count: int) -> list[dict[str, Any]] | None:
    found = stack.ledger.notifications(TENANT, USER)[0]
    return found if len(found) == count else None


def test_a_template_reaches_the_chat_the_webhook_and_the_ledger_as_one_text(
    stack: Stack, receiver: Receiver
) -> None:
    stack.grants(TENANT, USER)
    _grant_the_chat(stack)
    refused = stack.send(
        CommandVerb.CREATE,
        TENANT,
        USER,
        definition=watcher("w-author", "hook", "Build {event_id} by {payload.author}"),
    )
    assert not refused.ok and refused.error is not None
    assert (refused.error.code, refused.error.field) == (ResultCode.INVALID, "delivery.message")
    assert "{payload.author} is not a leaf" in refused.error.message
    for watcher_id, target, message in (
        ("w-chat", "phone", TEMPLATE),
        ("w-hook", "hook", TEMPLATE),
        ("w-inbox", "inbox", TEMPLATE),
        ("w-default", "inbox", None),
    ):
        stack.ok(CommandVerb.CREATE, TENANT, USER, definition=watcher(watcher_id, target, message))
    observed = stack.clock.now()
    payload = {"status": "failed", "branch": "release/1.2", "author": AUTHOR}
    stack.publish("shared.src", "build.finished", "b-1", payload)

    chats = stack.wait("the chat message", lambda: receiver.messages())
    hooks = stack.wait("the webhook", lambda: [r for r in receiver.requests if r.path == "/hook"])
    notes = stack.wait("both ledger notifications", lambda: _notifications(stack, 2))

    assert [m["text"] for m in chats] == ["Build b-1 failed on release/1.2"]
    body = hooks[0].json()
    assert body["message"] == "Build b-1 failed on release/1.2"
    assert (body["watcher_id"], body["outcome"], body["text"]) == ("w-hook", "satisfied", None)
    assert body["trigger"] == {"kind": "event", "event_type": "build.finished", "event_id": "b-1"}
    texts = {note["watcher_id"]: note["text"] for note in notes}
    assert texts["w-inbox"] == "Build b-1 failed on release/1.2"
    assert texts["w-default"] == (
        "w-default: satisfied (purpose ops.alert)\n"
        f"build.finished b-1 observed {rfc3339_seconds(observed)}\n"
        "status: failed\n"
        "branch: release/1.2"
    )
    shown = [json.dumps(chats), hooks[0].body.decode(), json.dumps(notes)]
    assert not any(AUTHOR in text for text in shown), "only retained leaves are ever shown"

    history = stack.history(TENANT, USER)
    report = replay(history)
    assert report.replayed == 4 and report.differences == []
    assert history.outbox is not None
    assert {e.message for e in history.outbox.values() if e} >= {"Build b-1 failed on release/1.2"}
