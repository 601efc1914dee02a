"""Standard Webhooks signatures: the HMAC a receiver checks to trust a vigil delivery.

Owns :func:`signing_key` (a ``whsec_`` secret of at least :data:`MIN_KEY_BYTES` bytes, else a
``ConfigError``), :func:`sign` (``v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>``)
and :func:`verify`, the receiver's side (several signatures, stale timestamps refused). Leaves
out where the secret comes from (``registry``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from pipeline.rules.errors import ConfigError

__all__ = [
    "DEFAULT_TOLERANCE_SECONDS",
    "MAX_SECRET_LENGTH",
    "MIN_KEY_BYTES",
    "SECRET_PREFIX",
    "Verification",
    "sign",
    "signing_key",
    "verify",
]

SECRET_PREFIX: Final = "whsec_"
MIN_KEY_BYTES: Final = 24
MAX_SECRET_LENGTH: Final = 1024  # characters read; a longer value is refused unread
GENERATE_HINT: Final = (
    'generate one with: python3 -c \'import base64, os; print("whsec_" + '
    "base64.b64encode(os.urandom(32)).decode())'"
)
DEFAULT_TOLERANCE_SECONDS: Final = 300  # the Standard Webhooks recommendation
_VERSION: Final = "v1"


class Verification(StrEnum):
    """Why a receiver accepts or refuses a request."""

    VALID = "valid"
    MISSING_HEADERS = "missing_headers"
    BAD_TIMESTAMP = "bad_timestamp"  # not an integer
    STALE_TIMESTAMP = "stale_timestamp"  # outside the tolerance, either way
    NO_MATCH = "no_match"  # no v1 signature matches: wrong secret or altered body


def signing_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret (``whsec_`` + base64 of >= 24 bytes);
    anything else raises :class:`ConfigError`, which never echoes the secret."""
    if not secret:
        raise ConfigError(f"a webhook signing secret is empty; {GENERATE_HINT}")
    if len(secret) > MAX_SECRET_LENGTH:
        raise ConfigError(f"a webhook signing secret is longer than {MAX_SECRET_LENGTH} characters")
    if not secret.startswith(SECRET_PREFIX):
        raise ConfigError(
            f"a webhook signing secret is a Standard Webhooks secret starting {SECRET_PREFIX}; "
            + GENERATE_HINT
        )
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(
            f"a {SECRET_PREFIX}… webhook secret is not valid base64; {GENERATE_HINT}"
        ) from None
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(
            f"a {SECRET_PREFIX}… webhook secret holds {len(key)} bytes, at least "
            f"{MIN_KEY_BYTES} are needed; {GENERATE_HINT}"
        )
    return key


def _digest(key: bytes, msg_id: str, timestamp: int, body: bytes) -> bytes:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value for one request."""
    return f"{_VERSION}," + base64.b64encode(_digest(key, msg_id, timestamp, body)).decode()


def verify(
    key: bytes,
    headers: Mapping[str, str],
    body: bytes,
    now_seconds: int,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
) -> Verification:
    """Check a request's ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``
    (header names in lower case) against ``key``, in constant time."""
    msg_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not msg_id or not stamp or not signatures:
        return Verification.MISSING_HEADERS
    try:
        timestamp = int(stamp)
    except ValueError:
        return Verification.BAD_TIMESTAMP
    if abs(now_seconds - timestamp) > tolerance_seconds:
        return Verification.STALE_TIMESTAMP
    expected = _digest(key, msg_id, timestamp, body)
    for candidate in signatures.split():
        version, _, encoded = candidate.partition(",")
        if version != _VERSION:
            continue
        try:
            given = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(given, expected):
            return Verification.VALID
    return Verification.NO_MATCH
