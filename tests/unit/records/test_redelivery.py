"""The ``redeliveries`` record: a request round-trips; any decoded value out of bounds is a
``SerdeError`` (the worker dead-letters it), never another exception."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kafka.serde import default_codec
from pipeline.records.redelivery import decode_redelivery, encode_redelivery
from pipeline.rules.commands import Redelivery
from pipeline.rules.errors import SerdeError

pytestmark = pytest.mark.unit

CODEC = default_codec()
KEY = "ab" * 32
AT = datetime(2026, 12, 1, 12, tzinfo=UTC)


def test_a_request_round_trips() -> None:
    request = Redelivery(KEY, "acme", "u-1", "r-1", AT)
    assert decode_redelivery(CODEC, encode_redelivery(CODEC, request)) == request


@settings(max_examples=300, deadline=None)
@given(
    key=st.one_of(st.just(KEY), st.text(max_size=70), st.text("0123456789abcdef", max_size=70)),
    tenant=st.one_of(st.just("acme"), st.text(max_size=300)),
    request_id=st.one_of(st.just("r-1"), st.text(max_size=200)),
    at=st.datetimes(timezones=st.just(UTC)),
)
def test_any_decoded_request_is_bounded_or_refused(
    key: str, tenant: str, request_id: str, at: datetime
) -> None:
    value: dict[str, Any] = {
        "delivery_key": key,
        "tenant_id": tenant,
        "user_id": "u-1",
        "request_id": request_id,
        "requested_at": at,
    }
    raw = CODEC.encode("redelivery", value)
    try:
        request = decode_redelivery(CODEC, raw)
    except SerdeError:
        return
    assert len(request.delivery_key) == 64 and set(request.delivery_key) <= set("0123456789abcdef")
    assert len(request.tenant_id) <= 256 and len(request.request_id) <= 128
    assert 1970 <= request.requested_at.year <= 9999
