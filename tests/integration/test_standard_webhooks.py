"""Interoperability: what vigil's webhook adapter sends verifies with the PyPI
``standardwebhooks`` package (the reference implementation receivers use), and what that package
signs verifies with vigil's own receiver side. Real HTTP to a local receiver; no broker."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from consumers.delivery.adapters.signing import Verification, sign, signing_key, verify
from consumers.delivery.adapters.webhook import WebhookAdapter, WebhookConfig
from pipeline.clock import ManualClock
from tests.integration.test_adapters import delivery
from tests.receiver import Receiver

pytestmark = pytest.mark.integration

SECRET = "whsec_" + base64.b64encode(b"interop-test-key-of-32-bytes-ok!").decode()


@pytest.fixture
def sent() -> Iterator[tuple[bytes, dict[str, str]]]:
    with Receiver() as receiver:
        clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
        config = WebhookConfig(receiver.hook_url, SecretStr(SECRET), timedelta(seconds=5))
        adapter = WebhookAdapter(config, clock=clock)
        try:
            assert adapter.send(delivery(7)).ok
        finally:
            adapter.close()
        (request,) = receiver.requests
        yield request.body, request.headers


def test_a_vigil_webhook_verifies_with_the_standardwebhooks_package(
    sent: tuple[bytes, dict[str, str]],
) -> None:
    body, headers = sent
    payload = Webhook(SECRET).verify(body, headers)
    assert payload == json.loads(body)
    assert payload["delivery_key"] == headers["webhook-id"] == headers["idempotency-key"]


def test_an_altered_vigil_webhook_fails_the_standardwebhooks_package(
    sent: tuple[bytes, dict[str, str]],
) -> None:
    body, headers = sent
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(body.replace(b"release", b"r3lease"), headers)
    other = "whsec_" + base64.b64encode(b"another-key-of-32-bytes-exactly!").decode()
    with pytest.raises(WebhookVerificationError):
        Webhook(other).verify(body, headers)


_keys = st.binary(min_size=24, max_size=64)
_ids = st.text(alphabet="abcdef0123456789_", min_size=1, max_size=64)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(key=_keys, msg_id=_ids, body=st.text(max_size=200))
def test_signatures_agree_both_ways_for_any_key_id_and_body(
    key: bytes, msg_id: str, body: str
) -> None:
    secret = "whsec_" + base64.b64encode(key).decode()
    now = int(time.time())
    ours = sign(signing_key(secret), msg_id, now, body.encode())
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(now), "webhook-signature": ours}
    Webhook(secret).verify(body.encode(), headers, json_parse=False)  # raises on a mismatch
    theirs = Webhook(secret).sign(msg_id, datetime.fromtimestamp(now, UTC), body)
    assert theirs == ours
    assert verify(signing_key(secret), headers, body.encode(), now) is Verification.VALID
