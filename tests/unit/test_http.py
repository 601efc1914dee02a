"""The shared HTTP helpers' tables: status → code, Retry-After, transport errors → code."""

from __future__ import annotations

import ssl
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from pipeline.http import (
    MAX_RETRY_AFTER,
    classify_error,
    classify_status,
    parse_retry_after,
)
from pipeline.rules.outcomes import ErrorCode

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (200, None),
        (202, None),
        (204, None),
        (301, ErrorCode.REJECTED),
        (307, ErrorCode.REJECTED),
        (400, ErrorCode.HTTP_4XX),
        (401, ErrorCode.HTTP_4XX),
        (404, ErrorCode.HTTP_4XX),
        (409, ErrorCode.HTTP_4XX),
        (410, ErrorCode.HTTP_410),
        (429, ErrorCode.HTTP_429),
        (500, ErrorCode.HTTP_5XX),
        (503, ErrorCode.HTTP_5XX),
        (599, ErrorCode.HTTP_5XX),
    ],
)
def test_classify_status_maps_each_status_to_its_code(status: int, code: ErrorCode | None) -> None:
    assert classify_status(status) is code


@pytest.mark.parametrize(
    ("header", "wait"),
    [
        ("120", timedelta(seconds=120)),
        (" 0 ", timedelta(0)),
        ("Sun, 29 Nov 2026 12:01:30 GMT", timedelta(seconds=90)),
        ("Sunday, 29-Nov-26 12:00:05 GMT", timedelta(seconds=5)),
        ("Sun, 29 Nov 2026 11:00:00 GMT", timedelta(0)),  # in the past: go now
        ("99999999", MAX_RETRY_AFTER),
        ("9" * 40, MAX_RETRY_AFTER),
        (None, None),
        ("", None),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
    ],
)
def test_parse_retry_after_reads_seconds_and_http_dates(
    header: str | None, wait: timedelta | None
) -> None:
    assert parse_retry_after(header, NOW) == wait


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (httpx.ReadTimeout("slow"), ErrorCode.TIMEOUT),
        (httpx.ConnectTimeout("slow"), ErrorCode.TIMEOUT),
        (httpx.PoolTimeout("busy"), ErrorCode.TIMEOUT),
        (httpx.ConnectError("refused"), ErrorCode.CONNECT),
        (httpx.ReadError("reset"), ErrorCode.CONNECT),
        (httpx.RemoteProtocolError("closed"), ErrorCode.CONNECT),
        (httpx.UnsupportedProtocol("ftp"), ErrorCode.REJECTED),
        (httpx.LocalProtocolError("bug"), ErrorCode.INTERNAL),
    ],
)
def test_classify_error_maps_transport_failures_to_codes(
    exc: httpx.HTTPError, code: ErrorCode
) -> None:
    assert classify_error(exc) is code


def test_classify_error_connect_error_caused_by_ssl_is_tls() -> None:
    exc = httpx.ConnectError("handshake")
    exc.__cause__ = ssl.SSLError(1, "wrong version number")
    assert classify_error(exc) is ErrorCode.TLS
