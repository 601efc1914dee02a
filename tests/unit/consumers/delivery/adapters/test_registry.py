"""Adapters from configuration, and what the I/O-free adapters produce (log, console, in_app).

HTTP adapters are exercised against a real receiver in tests/integration/test_adapters.py.
"""

from __future__ import annotations

import io
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from consumers.delivery.adapters import (
    AdapterKind,
    AdapterRegistry,
    SendResult,
    build_adapters,
    webhook_body,
)
from consumers.delivery.adapters.base import message_text
from consumers.delivery.adapters.in_app import InAppAdapter, InAppConfig
from pipeline.clock import ManualClock
from pipeline.config import parse_config
from pipeline.kafka.serde import default_codec
from pipeline.records.notification import decode_notification
from pipeline.rules.bounds import MAX_MESSAGE
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.errors import ConfigError
from pipeline.rules.keys import subject_key
from pipeline.rules.message import Channel
from pipeline.rules.outbox import OutboxEntry, as_sent
from pipeline.rules.outcomes import ErrorCode, Outcome
from tests.entries import outbox_entry
from tests.keyring import ring_with

pytestmark = pytest.mark.unit

KEY = "ab" * 32
NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
RING = ring_with(subject_owner("acme", "u-42"))
SECRET = "whsec_c2VjcmV0LWtleS1ieXRlcy1mb3ItcmVnaXN0cnktdGVzdHM="
TOKEN = "123456:telegram-token-value"
ENV = {"HOOK_SECRET": SECRET, "BOT_TOKEN": TOKEN}

CONFIG: dict[str, Any] = {
    "kafka": {"topic_prefix": "acme."},
    "destinations": {
        "ops-hook": {
            "kind": "webhook",
            "url": "http://127.0.0.1:9/hook",
            "secret_env": "HOOK_SECRET",
        },
        "plain-hook": {"kind": "webhook", "url": "http://127.0.0.1:9/plain", "unsigned": True},
        "ledger": {"kind": "in_app"},
        "audit": {"kind": "log"},
    },
    "chats": {
        "me": {"kind": "console"},
        "phone": {"kind": "telegram", "token_env": "BOT_TOKEN", "chat_id": 42},
    },
}


def delivery(**changes: Any) -> OutboxEntry:
    fields: dict[str, Any] = {
        "delivery_key": KEY,
        "tenant_id": "acme",
        "user_id": "u-42",
        "watcher_id": "release-build-failed",
        "outcome": Outcome.SATISFIED,
        "trigger": {"kind": "event", "event_type": "build.finished", "event_id": "b-981"},
        "evidence_digest": "cd" * 32,
        "due_at": NOW,
        "late": False,
        "verb": "notify",
        "target": "audit",
        "delivery_retention": timedelta(days=30),
    }
    return outbox_entry(**(fields | changes))


@pytest.fixture
def stdout() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def registry(stdout: io.StringIO) -> Any:
    with build_adapters(
        parse_config(CONFIG), environ=ENV, stdout=stdout, clock=ManualClock(NOW), sealer=RING
    ) as built:
        yield built


# --- the registry ----------------------------------------------------------------------------


def test_build_adapters_makes_one_adapter_of_the_right_kind_per_name(
    registry: AdapterRegistry,
) -> None:
    kinds = {name: adapter.kind for name in registry.targets if (adapter := registry.resolve(name))}
    assert kinds == {
        "ops-hook": AdapterKind.WEBHOOK,
        "plain-hook": AdapterKind.WEBHOOK,
        "ledger": AdapterKind.IN_APP,
        "audit": AdapterKind.LOG,
        "me": AdapterKind.CONSOLE,
        "phone": AdapterKind.CHAT,
    }


def test_resolve_unknown_target_returns_none(registry: AdapterRegistry) -> None:
    assert registry.resolve("nowhere") is None


def test_send_to_unknown_target_fails_closed_as_rejected_and_sends_nothing(
    registry: AdapterRegistry, stdout: io.StringIO
) -> None:
    result = registry.send(delivery(target="nowhere"))
    assert (result.ok, result.error) == (False, ErrorCode.REJECTED)
    assert stdout.getvalue() == ""


@pytest.mark.parametrize(
    ("missing", "key"),
    [("HOOK_SECRET", "destinations.ops-hook.secret_env"), ("BOT_TOKEN", "chats.phone.token_env")],
)
def test_build_adapters_with_unset_secret_variable_refuses_naming_the_variable(
    missing: str, key: str
) -> None:
    env = {name: value for name, value in ENV.items() if name != missing}
    with pytest.raises(ConfigError, match=f"{key}: environment variable {missing}"):
        build_adapters(parse_config(CONFIG), environ=env, sealer=RING)


@pytest.mark.parametrize("secret", ["a-raw-secret-of-plenty-of-bytes", "whsec_c2hvcnQ="])
def test_build_adapters_refuses_a_non_standard_webhook_secret_naming_the_key(secret: str) -> None:
    with pytest.raises(ConfigError) as raised:
        build_adapters(parse_config(CONFIG), environ={**ENV, "HOOK_SECRET": secret}, sealer=RING)
    message = str(raised.value)
    assert message.startswith("destinations.ops-hook.secret_env: HOOK_SECRET: ")
    assert "whsec_" in message and secret.removeprefix("whsec_") not in message


def test_build_adapters_never_shows_secrets_in_reprs(registry: AdapterRegistry) -> None:
    adapters = [registry.resolve(name) for name in sorted(registry.targets)]
    shown = " ".join(repr(a) for a in adapters) + " ".join(
        repr(getattr(a, "_config", None)) for a in adapters
    )
    assert SECRET not in shown
    assert "telegram-token-value" not in shown


class _Broken:
    kind = AdapterKind.LOG

    def send(self, entry: OutboxEntry) -> SendResult:
        raise RuntimeError("boom with private text http://x/botTOKEN/")

    def close(self) -> None:
        pass


def test_send_through_a_crashing_adapter_is_internal_and_logs_only_the_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    result = AdapterRegistry({"x": _Broken()}).send(delivery(target="x"))
    assert (result.ok, result.error) == (False, ErrorCode.INTERNAL)
    assert "RuntimeError" in caplog.text
    assert "private text" not in caplog.text


# --- the interface -----------------------------------------------------------------------------


def test_send_result_refuses_ok_with_an_error_and_failure_without_one() -> None:
    with pytest.raises(ValueError):
        SendResult(ok=True, error=ErrorCode.TIMEOUT)
    with pytest.raises(ValueError):
        SendResult(ok=False)
    assert SendResult.failed(ErrorCode.HTTP_5XX).label == "http_5xx"


def test_webhook_body_is_canonical_json_with_the_designed_fields() -> None:
    body = webhook_body(delivery())
    data = json.loads(body)
    assert set(data) == {
        "delivery_key",
        "watcher_id",
        "tenant_id",
        "user_id",
        "outcome",
        "trigger",
        "evidence_digest",
        "due_at",
        "late",
        "text",
        "message",
    }
    assert (data["delivery_key"], data["outcome"], data["text"]) == (KEY, "satisfied", None)
    assert data["message"] == "release-build-failed: satisfied"
    assert data["due_at"] == "2026-11-29T12:00:00.000000Z"
    assert body == json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


# --- log, console, chat text -------------------------------------------------------------------


def test_log_adapter_writes_one_json_line_per_delivery(
    registry: AdapterRegistry, stdout: io.StringIO
) -> None:
    first = registry.send(delivery())
    second = registry.send(delivery(delivery_key="ef" * 32, text="hello"))
    lines = stdout.getvalue().splitlines()
    assert first.ok and second.ok
    assert len(lines) == 2
    parsed = [json.loads(line) for line in lines]
    assert parsed[0] == json.loads(webhook_body(delivery())) | {"verb": "notify", "target": "audit"}
    assert (parsed[1]["delivery_key"], parsed[1]["text"]) == ("ef" * 32, "hello")


def test_log_adapter_on_a_closed_stream_is_unavailable() -> None:
    closed = io.StringIO()
    closed.close()
    with build_adapters(parse_config(CONFIG), environ=ENV, stdout=closed, sealer=RING) as built:
        result = built.send(delivery())
    assert (result.ok, result.error) == (False, ErrorCode.UNAVAILABLE)


def test_console_adapter_prints_the_text_with_repeat_risk(
    registry: AdapterRegistry, stdout: io.StringIO
) -> None:
    result = registry.send(delivery(target="me", verb="send", text="stand-up in 5"))
    assert stdout.getvalue() == "stand-up in 5\n"
    assert (result.ok, result.repeat_risk) == (True, True)


def test_chat_text_of_a_late_one_shot_says_late_when_it_was_due_and_by_how_much() -> None:
    entry = delivery(verb="send", text="hi", late=True)
    assert message_text(entry, Channel.CHAT) == "hi\n(late: due at 2026-11-29T12:00:00Z)"
    later = NOW + timedelta(minutes=6, seconds=3)
    assert (
        message_text(entry, Channel.CHAT, later)
        == "hi\n(late: due at 2026-11-29T12:00:00Z, late by 6m3s)"
    )
    for beside_late_and_due_at in (Channel.IN_APP, Channel.WEBHOOK, Channel.LOG):
        assert message_text(entry, beside_late_and_due_at, later) == "hi"


def test_console_adapter_says_how_late_a_late_fire_is_sent(
    registry: AdapterRegistry, stdout: io.StringIO
) -> None:
    due = NOW - timedelta(minutes=6, seconds=3)
    registry.send(delivery(target="me", verb="send", text="stand-up", due_at=due, late=True))
    assert stdout.getvalue() == "stand-up\n(late: due at 2026-11-29T11:53:57Z, late by 6m3s)\n"


def test_schedule_entry_written_on_time_but_claimed_late_is_sent_late() -> None:
    """Delivery was down: the evaluator decided it on time, the claim came 7 minutes later."""
    entry = delivery(verb="send", target="me", text="stretch", schedule_time=NOW)
    assert as_sent(entry, NOW + timedelta(seconds=1)) is entry
    claimed = NOW + timedelta(minutes=7)
    late = as_sent(entry, claimed)
    assert late.late and late._replace(late=False) == entry
    assert (
        message_text(late, Channel.CHAT, claimed)
        == "stretch\n(late: due at 2026-11-29T12:00:00Z, late by 7m)"
    )
    notify = entry._replace(schedule_time=None)
    assert as_sent(notify, claimed) is notify


def test_chat_text_of_a_notify_without_a_message_names_the_watcher_and_outcome() -> None:
    assert message_text(delivery(), Channel.CHAT) == "release-build-failed: satisfied"


def test_chat_text_of_a_notify_is_its_rendered_message() -> None:
    entry = delivery(message="Build b-1 failed on release/1.2")
    assert message_text(entry, Channel.CHAT) == "Build b-1 failed on release/1.2"


def test_chat_text_longer_than_the_limit_is_cut_to_it() -> None:
    text = message_text(delivery(text="x" * (MAX_MESSAGE + 10)), Channel.CHAT)
    assert len(text) == MAX_MESSAGE
    assert text.endswith("…")


def test_every_destination_shows_one_message_each_escaped_for_its_channel(
    registry: AdapterRegistry, stdout: io.StringIO
) -> None:
    entry = delivery(message="Build b-1\tfailed\non \x1b[31mrelease\\1.2")
    registry.send(entry)
    (line,) = stdout.getvalue().splitlines()
    hook = json.loads(webhook_body(entry))
    assert hook["message"] == "Build b-1\tfailed\non \ufffd[31mrelease\\1.2"
    assert json.loads(line)["message"] == "Build b-1\\tfailed\\non \ufffd[31mrelease\\\\1.2"
    assert message_text(entry, Channel.CHAT) == hook["message"]


# --- in_app ------------------------------------------------------------------------------------


def test_in_app_send_returns_a_ledger_record_keyed_by_subject_for_the_transaction(
    registry: AdapterRegistry,
) -> None:
    result = registry.send(delivery(target="ledger", verb="send", text="hi"))
    assert result.ok
    assert result.after_commit == ()
    (record,) = result.records
    assert record.topic == "acme.notifications"
    assert record.key == subject_key("acme", "u-42").encode()
    record_type, raw_value = default_codec().decode(record.value)
    assert record_type == "notification"
    assert raw_value["text"] is None and raw_value["trigger"] is None, "sealed, not plain"
    value = decode_notification(default_codec(), RING, record.value)
    assert (value["kind"], value["delivery_key"], value["text"], value["verb"]) == (
        "notification",
        KEY,
        "hi",
        "send",
    )
    notify = registry.send(delivery(target="ledger", message="Build b-1 failed"))
    note = decode_notification(default_codec(), RING, notify.records[0].value)
    assert (note["text"], note["verb"]) == ("Build b-1 failed", "notify")
    assert value["trigger"] == delivery().trigger and value["erased"] is False
    assert value["created_at"] == NOW
    assert value["due_at"] == NOW
    assert value["retain_until"] == NOW + timedelta(days=30)


def test_in_app_for_a_subject_without_a_key_writes_no_text() -> None:
    adapter = InAppAdapter(
        InAppConfig(topic="vigil.notifications"), sealer=ring_with(), clock=ManualClock(NOW)
    )
    result = adapter.send(delivery(target="ledger", verb="send", text="private"))
    (record,) = result.records
    assert b"private" not in record.value
    assert decode_notification(default_codec(), RING, record.value)["erased"] is True


def test_in_app_with_wake_session_adds_a_content_free_wake_after_commit() -> None:
    adapter = InAppAdapter(
        InAppConfig(topic="vigil.notifications"), sealer=RING, clock=ManualClock(NOW)
    )
    result = adapter.send(
        delivery(target="ledger", verb="send", text="private", wake_session=True, session_id="s-1")
    )
    (wake,) = result.after_commit
    assert wake.key == result.records[0].key
    _, value = default_codec().decode(wake.value)
    assert (value["kind"], value["delivery_key"], value["session_id"]) == ("wake", KEY, "s-1")
    assert value["text"] is None and value["trigger"] is None and value["outcome"] is None
    assert b"private" not in wake.value


def test_in_app_with_unencodable_text_is_rejected() -> None:
    adapter = InAppAdapter(
        InAppConfig(topic="vigil.notifications"), sealer=RING, clock=ManualClock(NOW)
    )
    result = adapter.send(delivery(trigger={"kind": "event", "event_id": "\ud800"}))
    assert (result.ok, result.error, result.records) == (False, ErrorCode.REJECTED, ())
