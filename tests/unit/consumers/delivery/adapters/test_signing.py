"""Standard Webhooks signing: the published vector, key forms, and the receiver's checks."""

from __future__ import annotations

import base64

import pytest

from consumers.delivery.adapters.signing import Verification, sign, signing_key, verify
from pipeline.rules.errors import ConfigError

pytestmark = pytest.mark.unit

# The Standard Webhooks specification's test vector (also the Svix libraries' own test).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def _headers(
    signature: str, msg_id: str = SPEC_ID, timestamp: int = SPEC_TIMESTAMP
) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }


def test_sign_with_whsec_secret_reproduces_the_specification_vector() -> None:
    key = signing_key(SPEC_SECRET)
    assert sign(key, SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY) == SPEC_SIGNATURE


@pytest.mark.parametrize(
    "secret",
    [
        "",
        "plain-sécret-that-is-long-enough-to-be-a-key",
        "whsec_",
        "whsec_not*base64!",
        "whsec_" + base64.b64encode(b"x" * 23).decode(),
        "whsec_" + "A" * 2000,
    ],
)
def test_signing_key_refuses_anything_but_a_standard_webhooks_secret_without_echoing_it(
    secret: str,
) -> None:
    with pytest.raises(ConfigError) as raised:
        signing_key(secret)
    if secret.removeprefix("whsec_"):
        assert secret.removeprefix("whsec_")[:40] not in str(raised.value)


def test_a_refused_secret_says_how_to_generate_one() -> None:
    with pytest.raises(ConfigError, match=r"whsec_.*os\.urandom"):
        signing_key("raw-secret")


def test_signing_key_of_24_bytes_is_the_decoded_base64() -> None:
    key = b"k" * 24
    assert signing_key("whsec_" + base64.b64encode(key).decode()) == key


def test_verify_with_the_right_key_and_fresh_timestamp_is_valid() -> None:
    key = signing_key(SPEC_SECRET)
    assert (
        verify(key, _headers(SPEC_SIGNATURE), SPEC_BODY, SPEC_TIMESTAMP + 10) is Verification.VALID
    )


def test_verify_with_a_wrong_secret_finds_no_match() -> None:
    wrong = signing_key("whsec_" + base64.b64encode(b"another key of 24 bytes!").decode())
    assert (
        verify(wrong, _headers(SPEC_SIGNATURE), SPEC_BODY, SPEC_TIMESTAMP) is Verification.NO_MATCH
    )


def test_verify_with_an_altered_body_finds_no_match() -> None:
    key = signing_key(SPEC_SECRET)
    assert verify(key, _headers(SPEC_SIGNATURE), SPEC_BODY + b" ", SPEC_TIMESTAMP) is (
        Verification.NO_MATCH
    )


def test_verify_accepts_any_of_several_signatures_during_key_rotation() -> None:
    key = signing_key(SPEC_SECRET)
    header = f"v1,bm9wZQ== v2,whatever {SPEC_SIGNATURE}"
    assert verify(key, _headers(header), SPEC_BODY, SPEC_TIMESTAMP) is Verification.VALID


@pytest.mark.parametrize("skew", [-301, 301])
def test_verify_outside_the_tolerance_reports_a_stale_timestamp(skew: int) -> None:
    key = signing_key(SPEC_SECRET)
    assert verify(key, _headers(SPEC_SIGNATURE), SPEC_BODY, SPEC_TIMESTAMP + skew) is (
        Verification.STALE_TIMESTAMP
    )


def test_verify_with_missing_or_malformed_headers_says_which() -> None:
    key = signing_key(SPEC_SECRET)
    headers = _headers(SPEC_SIGNATURE)
    del headers["webhook-signature"]
    assert verify(key, headers, SPEC_BODY, SPEC_TIMESTAMP) is Verification.MISSING_HEADERS
    bad = _headers(SPEC_SIGNATURE) | {"webhook-timestamp": "soon"}
    assert verify(key, bad, SPEC_BODY, SPEC_TIMESTAMP) is Verification.BAD_TIMESTAMP
