"""An adapter's categorical result of an HTTP reply: status and Retry-After, never the body."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from consumers.delivery.adapters.base import SendResult
from pipeline.http import Reply
from pipeline.rules.outcomes import ErrorCode

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def test_result_of_429_keeps_retry_after_and_never_the_body() -> None:
    result = SendResult.of_reply(Reply(429, "30", b"secret detail"), NOW)
    assert (result.ok, result.error, result.retry_after) == (
        False,
        ErrorCode.HTTP_429,
        timedelta(seconds=30),
    )
    assert "secret detail" not in repr(result)


def test_result_of_zero_retry_after_header_wins_over_an_api_hint() -> None:
    result = SendResult.of_reply(Reply(429, "0", b""), NOW, retry_after=timedelta(seconds=9))
    assert result.retry_after == timedelta(0)


def test_result_of_without_header_uses_the_api_hint() -> None:
    result = SendResult.of_reply(Reply(429, None, b""), NOW, retry_after=timedelta(seconds=9))
    assert result.retry_after == timedelta(seconds=9)


def test_result_of_4xx_ignores_retry_after_because_it_is_terminal() -> None:
    result = SendResult.of_reply(Reply(404, "30", b""), NOW)
    assert (result.error, result.retry_after) == (ErrorCode.HTTP_4XX, None)


def test_result_of_2xx_is_delivered() -> None:
    result = SendResult.of_reply(Reply(204, None, b""), NOW, repeat_risk=True)
    assert (result.ok, result.error, result.repeat_risk, result.label) == (
        True,
        None,
        True,
        "delivered",
    )
