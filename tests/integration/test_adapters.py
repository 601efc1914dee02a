"""Delivery adapters against real servers: a real local HTTP receiver over loopback (webhooks,
the Telegram-shaped chat API) and the real Kafka broker (the in_app ledger record inside a
transaction). Nothing is mocked.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from pydantic import SecretStr

from consumers.delivery.adapters import (
    AdapterRegistry,
    SendResult,
    build_adapters,
    webhook_body,
)
from consumers.delivery.adapters.chat import ChatAdapter, TelegramConfig
from consumers.delivery.adapters.in_app import InAppAdapter, InAppConfig
from consumers.delivery.adapters.signing import Verification
from consumers.delivery.adapters.webhook import WebhookAdapter, WebhookConfig
from pipeline.clock import ManualClock
from pipeline.config import parse_config
from pipeline.kafka.clients import producer_config, table_consumer_config
from pipeline.kafka.serde import default_codec
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.instants import rfc3339_seconds
from pipeline.rules.keys import subject_key
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import ErrorCode, Outcome
from tests.entries import outbox_entry
from tests.keyring import ring_with
from tests.receiver import FAILURE_BODY, Receiver

pytestmark = pytest.mark.integration

SECRET = "whsec_dmlnaWwtdGVzdC1zaWduaW5nLWtleS1mb3ItYWRhcHRlcnM="
OTHER_SECRET = "whsec_YW5vdGhlci1rZXktb2YtdHdlbnR5LWZvdXItYnl0ZXM="
TOKEN = "4242:bot-token-for-tests"
FAST = timedelta(seconds=5)


def delivery(n: int = 0, **changes: Any) -> OutboxEntry:
    fields: dict[str, Any] = {
        "delivery_key": f"{n:064x}",
        "tenant_id": "acme",
        "user_id": "u-42",
        "watcher_id": "release-build-failed",
        "outcome": Outcome.SATISFIED,
        "trigger": {"kind": "event", "event_type": "build.finished", "event_id": f"b-{n}"},
        "evidence_digest": "cd" * 32,
        "due_at": datetime(2026, 11, 29, 8, 0, tzinfo=UTC),
        "late": False,
        "verb": "notify",
        "target": "ops-hook",
    }
    return outbox_entry(**(fields | changes))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(secret=SECRET, bot_token=TOKEN) as running:
        yield running


@pytest.fixture
def clock() -> ManualClock:
    # The receiver checks webhook-timestamp against its own clock: start at the real now.
    return ManualClock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture
def hook(receiver: Receiver, clock: ManualClock) -> Iterator[WebhookAdapter]:
    adapter = WebhookAdapter(WebhookConfig(receiver.hook_url, SecretStr(SECRET), FAST), clock=clock)
    yield adapter
    adapter.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- webhook: signature and headers -----------------------------------------------------------


def test_webhook_signature_verifies_on_the_receiver(
    hook: WebhookAdapter, receiver: Receiver
) -> None:
    result = hook.send(delivery())
    (request,) = receiver.requests
    assert result.ok
    assert request.signature is Verification.VALID


def test_webhook_signed_with_another_secret_fails_verification(
    receiver: Receiver, clock: ManualClock
) -> None:
    adapter = WebhookAdapter(
        WebhookConfig(receiver.hook_url, SecretStr(OTHER_SECRET), FAST), clock=clock
    )
    with adapter:
        adapter.send(delivery())
    (request,) = receiver.requests
    assert request.signature is Verification.NO_MATCH


def test_webhook_without_secret_sends_no_signature(receiver: Receiver, clock: ManualClock) -> None:
    adapter = WebhookAdapter(WebhookConfig(receiver.hook_url, None, FAST), clock=clock)
    with adapter:
        assert adapter.send(delivery()).ok
    (request,) = receiver.requests
    assert "webhook-signature" not in request.headers
    assert request.signature is Verification.MISSING_HEADERS


def test_webhook_headers_carry_the_delivery_key_timestamp_and_json_body(
    hook: WebhookAdapter, receiver: Receiver, clock: ManualClock
) -> None:
    sent = delivery(7, verb="send", text="hello")
    hook.send(sent)
    (request,) = receiver.requests
    assert request.path == "/hook"
    assert request.headers["idempotency-key"] == sent.delivery_key
    assert request.headers["webhook-id"] == sent.delivery_key
    assert request.headers["webhook-timestamp"] == str(int(clock.now().timestamp()))
    assert request.headers["webhook-signature"].startswith("v1,")
    assert request.headers["content-type"] == "application/json"
    assert request.body == webhook_body(sent)
    assert request.json()["text"] == "hello"


def test_webhook_retries_reuse_one_idempotency_key_with_fresh_valid_signatures(
    hook: WebhookAdapter, receiver: Receiver, clock: ManualClock
) -> None:
    receiver.fail(3, 500)
    results = []
    for _ in range(4):
        results.append(hook.send(delivery(3)))
        clock.advance(timedelta(seconds=7))
    assert [r.error for r in results] == [ErrorCode.HTTP_5XX] * 3 + [None]
    requests = receiver.requests
    assert receiver.distinct_keys() == {delivery(3).delivery_key}
    assert len({r.headers["webhook-timestamp"] for r in requests}) == 4
    assert all(r.signature is Verification.VALID for r in requests)


# --- webhook: status and transport → code ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (410, ErrorCode.HTTP_410),
        (400, ErrorCode.HTTP_4XX),
        (404, ErrorCode.HTTP_4XX),
        (429, ErrorCode.HTTP_429),
        (500, ErrorCode.HTTP_5XX),
        (503, ErrorCode.HTTP_5XX),
        (302, ErrorCode.REJECTED),
    ],
)
def test_webhook_failure_status_maps_to_its_code_without_the_body(
    hook: WebhookAdapter, receiver: Receiver, status: int, code: ErrorCode
) -> None:
    receiver.fail(1, status)
    result = hook.send(delivery())
    assert (result.ok, result.error, result.retry_after) == (False, code, None)
    assert FAILURE_BODY.decode() not in repr(result)
    assert len(receiver.requests) == 1  # a redirect is never followed


def test_webhook_429_with_retry_after_seconds_returns_the_wait(
    hook: WebhookAdapter, receiver: Receiver
) -> None:
    receiver.fail(1, 429, retry_after="120")
    result = hook.send(delivery())
    assert (result.error, result.retry_after) == (ErrorCode.HTTP_429, timedelta(seconds=120))


def test_webhook_503_with_retry_after_http_date_returns_the_wait_from_now(
    hook: WebhookAdapter, receiver: Receiver, clock: ManualClock
) -> None:
    receiver.fail(1, 503, retry_after=format_datetime(clock.now() + timedelta(minutes=3), True))
    result = hook.send(delivery())
    assert (result.error, result.retry_after) == (ErrorCode.HTTP_5XX, timedelta(minutes=3))


def test_webhook_to_a_receiver_that_stalls_past_the_timeout_is_timeout(
    receiver: Receiver, clock: ManualClock
) -> None:
    receiver.stall(30)
    short = timedelta(milliseconds=300)
    with WebhookAdapter(WebhookConfig(receiver.hook_url, None, short), clock=clock) as adapter:
        result = adapter.send(delivery())
    assert (result.ok, result.error) == (False, ErrorCode.TIMEOUT)


def test_webhook_to_a_closed_port_is_connect(clock: ManualClock) -> None:
    url = f"http://127.0.0.1:{_free_port()}/hook"
    with WebhookAdapter(WebhookConfig(url, None, FAST), clock=clock) as adapter:
        result = adapter.send(delivery())
    assert (result.ok, result.error) == (False, ErrorCode.CONNECT)


def test_webhook_https_to_a_plain_http_port_is_tls(receiver: Receiver, clock: ManualClock) -> None:
    url = receiver.hook_url.replace("http://", "https://")
    with WebhookAdapter(WebhookConfig(url, None, FAST), clock=clock) as adapter:
        result = adapter.send(delivery())
    assert (result.ok, result.error) == (False, ErrorCode.TLS)


def test_webhooks_sent_concurrently_through_one_registry_all_arrive_signed(
    receiver: Receiver, clock: ManualClock
) -> None:
    config = parse_config(
        {
            "destinations": {
                "ops-hook": {"kind": "webhook", "url": receiver.hook_url, "secret_env": "S"}
            }
        }
    )
    with (
        build_adapters(config, environ={"S": SECRET}, clock=clock, max_connections=8) as registry,
        ThreadPoolExecutor(8) as pool,
    ):
        results = list(pool.map(registry.send, [delivery(n) for n in range(64)]))
    assert all(r.ok for r in results)
    assert receiver.distinct_keys() == {delivery(n).delivery_key for n in range(64)}
    assert all(r.signature is Verification.VALID for r in receiver.requests)


# --- chat (Telegram-shaped) --------------------------------------------------------------------


@pytest.fixture
def chats(receiver: Receiver, clock: ManualClock) -> Iterator[AdapterRegistry]:
    config = parse_config(
        {
            "chats": {
                "phone": {
                    "kind": "telegram",
                    "api_base": receiver.url,
                    "token_env": "BOT_TOKEN",
                    "chat_id": -100123,
                },
                "stranger": {
                    "kind": "telegram",
                    "api_base": receiver.url,
                    "token_env": "WRONG_TOKEN",
                    "chat_id": "@channel",
                },
            }
        }
    )
    env = {"BOT_TOKEN": TOKEN, "WRONG_TOKEN": "1:wrong"}
    with build_adapters(config, environ=env, clock=clock) as registry:
        yield registry


def test_chat_posts_chat_id_and_text_to_the_bot_send_message_endpoint(
    chats: AdapterRegistry, receiver: Receiver
) -> None:
    result = chats.send(delivery(target="phone", verb="send", text="stand-up in 5"))
    (request,) = receiver.requests
    assert request.path == f"/bot{TOKEN}/sendMessage"
    assert receiver.messages() == [{"chat_id": -100123, "text": "stand-up in 5"}]
    assert (result.ok, result.repeat_risk) == (True, True)
    assert "idempotency-key" not in request.headers


def test_chat_late_one_shot_text_says_late_when_it_was_due_and_how_late_it_is_sent(
    chats: AdapterRegistry, receiver: Receiver, clock: ManualClock
) -> None:
    due = clock.now() - timedelta(minutes=6, seconds=12)
    chats.send(delivery(target="phone", verb="send", text="hi", due_at=due, late=True))
    (message,) = receiver.messages()
    assert message["text"] == f"hi\n(late: due at {rfc3339_seconds(due)}, late by 6m12s)"


def test_a_notify_reaches_the_chat_and_the_webhook_as_one_message_escaped_alike(
    chats: AdapterRegistry, hook: WebhookAdapter, receiver: Receiver
) -> None:
    entry = delivery(target="phone", message="Build b-1 failed on \x1b[2Jrelease/1.2\u202e")
    assert chats.send(entry).ok and hook.send(entry).ok
    (chat,) = receiver.messages()
    (body,) = [r.json() for r in receiver.requests if r.path == "/hook"]
    assert chat["text"] == body["message"] == "Build b-1 failed on \ufffd[2Jrelease/1.2\ufffd"
    assert body["text"] is None  # a notify's text stays null: message is the added field


def test_chat_with_a_wrong_token_is_http_4xx_and_never_logs_the_token(
    chats: AdapterRegistry, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = chats.send(delivery(target="stranger", verb="send", text="x"))
    right = chats.send(delivery(target="phone", verb="send", text="y"))
    assert (wrong.ok, wrong.error, wrong.repeat_risk) == (False, ErrorCode.HTTP_4XX, True)
    assert right.ok
    assert "HTTP Request" in caplog.text  # httpx did log both requests...
    assert TOKEN not in caplog.text and "1:wrong" not in caplog.text  # ...without their paths
    assert receiver.messages() == [{"chat_id": -100123, "text": "y"}]


def test_chat_flood_control_429_returns_retry_after_without_the_body(
    chats: AdapterRegistry, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    receiver.fail(1, 429, retry_after="11")
    result = chats.send(delivery(target="phone", verb="send", text="x"))
    assert (result.error, result.retry_after) == (ErrorCode.HTTP_429, timedelta(seconds=11))
    assert FAILURE_BODY.decode() not in repr(result) + caplog.text


def test_chat_direct_adapter_repr_hides_the_token(receiver: Receiver) -> None:
    config = TelegramConfig(api_base=receiver.url, token=SecretStr(TOKEN), chat_id="1")
    adapter = ChatAdapter(config)
    try:
        assert TOKEN not in repr(adapter) + repr(config)
    finally:
        adapter.close()


# --- in_app: the ledger record inside a real Kafka transaction --------------------------------


def _produce_in_transaction(producer: Producer, result: SendResult, *, commit: bool) -> None:
    producer.begin_transaction()
    for record in result.records:
        producer.produce(record.topic, key=record.key, value=record.value, partition=0)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def _read_all(
    bootstrap: str, topic: str, name: str, until: Callable[[list[Any]], bool]
) -> list[Any]:
    consumer = Consumer(table_consumer_config(bootstrap, name))
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while not until(values) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            value = message.value()
            assert value is not None
            values.append((message.key(), default_codec().decode(value)[1]))
    finally:
        consumer.close()
    return values


def test_in_app_records_are_visible_only_when_their_transaction_commits(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("notifications")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    sealer = ring_with(subject_owner("acme", "u-42"))
    adapter = InAppAdapter(InAppConfig(topic=topic), sealer=sealer)
    producer = Producer(producer_config(kafka_bootstrap, transactional_id=unique_name("in-app-tx")))
    producer.init_transactions(30)
    _produce_in_transaction(producer, adapter.send(delivery(1, target="ledger")), commit=False)
    _produce_in_transaction(producer, adapter.send(delivery(2, target="ledger")), commit=True)

    seen = _read_all(kafka_bootstrap, topic, unique_name("reader"), lambda v: len(v) >= 1)

    assert [(key, value["delivery_key"]) for key, value in seen] == [
        (subject_key("acme", "u-42").encode(), delivery(2).delivery_key)
    ]
