"""The one outbound HTTP client (webhooks, chats, governed tools): one keep-alive client, one POST,
and every outcome mapped onto the closed set of :class:`~pipeline.rules.outcomes.ErrorCode`.

Owns :func:`make_client` (synchronous, thread-safe, no redirects, ``trust_env=False``),
:func:`post`, :func:`deadline`, the status and transport tables (:func:`classify_status`,
:func:`classify_error`) and URLs redacted in httpx's logs. Leaves out what a code means for
retries (``pipeline.rules.dispatch``).
"""

from __future__ import annotations

import contextvars
import logging
import ssl
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Final

import httpcore
import httpx

from pipeline.rules.outcomes import ErrorCode

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_TIMEOUT",
    "MAX_RETRY_AFTER",
    "USER_AGENT",
    "Reply",
    "classify_error",
    "classify_status",
    "deadline",
    "make_client",
    "parse_retry_after",
    "post",
]

DEFAULT_TIMEOUT: Final = timedelta(seconds=10)
DEFAULT_MAX_CONNECTIONS: Final = 64
# A destination cannot park an entry for longer than this; the retry ceiling still applies.
MAX_RETRY_AFTER: Final = timedelta(days=1)
USER_AGENT: Final = "vigil-delivery/1"
_DRAIN_LIMIT: Final = 64 * 1024


def _origin(url: httpx.URL) -> str:
    port = f":{url.port}" if url.port is not None else ""
    return f"{url.scheme}://{url.host}{port}/…"


class _RedactUrls(logging.Filter):
    """Cut every URL argument of an httpx log record down to its origin."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, httpx.URL) for a in record.args):
            record.args = tuple(_origin(a) if isinstance(a, httpx.URL) else a for a in record.args)
        return True


def _install_redaction() -> None:
    httpx_logger = logging.getLogger("httpx")
    if not any(isinstance(f, _RedactUrls) for f in httpx_logger.filters):
        httpx_logger.addFilter(_RedactUrls())


_install_redaction()


# --- one total deadline per call ------------------------------------------------------------

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "vigil_http_deadline", default=None
)


@contextmanager
def deadline(timeout: timedelta) -> Iterator[None]:
    """Every request this thread makes through a :func:`make_client` client inside the block
    ends within ``timeout`` from now (a timeout error past it), however slowly the peer sends.

    httpx's own timeouts apply to each connect, read and write, so a server trickling one byte every
    few seconds could hold a caller forever; the client's network layer clamps every socket
    operation to what is left of the caller's deadline, so a call lasts at most its timeout, however
    the peer behaves.
    """
    token = _DEADLINE.set(time.monotonic() + timeout.total_seconds())
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """``timeout`` clamped to what is left of the caller's deadline; ``expired`` once past."""
    end = _DEADLINE.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise expired("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read and write is clamped to the caller's deadline."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's synchronous socket backend, with every stream held to the deadline."""

    def __init__(self) -> None:
        self._sync = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._sync.connect_tcp(host, port, left, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._sync.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._sync.sleep(seconds)


class _DeadlineTransport(httpx.HTTPTransport):
    """httpx's own transport over a connection pool of :class:`_DeadlineBackend` sockets.

    httpx builds its pool in ``__init__`` with no way to name a network backend, so the pool
    is rebuilt here with the same settings; everything else (request mapping, error
    translation) stays httpx's."""

    def __init__(self, *, verify: ssl.SSLContext | bool, limits: httpx.Limits) -> None:
        super().__init__(verify=verify, limits=limits, trust_env=False)
        ssl_context = self._pool._ssl_context  # what httpx made of ``verify``
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_DeadlineBackend(),
        )


def make_client(
    *,
    timeout: timedelta = DEFAULT_TIMEOUT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    verify: ssl.SSLContext | bool = True,
) -> httpx.Client:
    """A keep-alive client for many destinations; size the caller's thread pool to
    ``max_connections`` or less, or a request waits for a connection (``timeout`` bounds it).
    Requests made inside :func:`deadline` end by it.

    Redirects are never followed (a delivery goes exactly where configuration says) and the
    environment's proxy and ``.netrc`` settings are not read (``trust_env=False``). httpx logs every
    request's URL at INFO; a chat URL holds the bot token and a webhook path may be a capability, so
    a filter on the ``httpx`` logger shows only scheme, host and port.
    """
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=30.0,
    )
    return httpx.Client(
        timeout=httpx.Timeout(timeout.total_seconds()),
        transport=_DeadlineTransport(verify=verify, limits=limits),
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": USER_AGENT},
    )


@dataclass(frozen=True, slots=True)
class Reply:
    """A response's status and the little an adapter may look at; the body prefix is for an
    API's own retry hint (Telegram's ``parameters.retry_after``) or, read whole up to the
    caller's limit, an API's answer (Telegram's ``getUpdates``); a delivery never keeps it."""

    status: int
    retry_after: str | None
    head: bytes = field(repr=False)
    complete: bool = True  # False: the body was longer than the caller's read limit


def classify_status(status: int) -> ErrorCode | None:
    """``None`` for 2xx, else the code of the status table above.

    2xx → delivered; 410 → ``http_410`` (terminal); 429 → ``http_429`` with its ``Retry-After``;
    other 4xx → ``http_4xx`` (terminal); 5xx → ``http_5xx`` (also with a ``Retry-After`` if given);
    1xx and 3xx (a redirect not followed) → ``rejected``. A response body is read (at most 64 KiB,
    so keep-alive can reuse the connection) and dropped, never kept.
    """
    if 200 <= status < 300:
        return None
    if status == 410:
        return ErrorCode.HTTP_410
    if status == 429:
        return ErrorCode.HTTP_429
    if 400 <= status < 500:
        return ErrorCode.HTTP_4XX
    if 500 <= status < 600:
        return ErrorCode.HTTP_5XX
    return ErrorCode.REJECTED


def _is_tls(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError | ssl.CertificateError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def classify_error(exc: httpx.HTTPError) -> ErrorCode:
    """The code of a transport failure (never its message: it may hold a URL with a token).

    A timeout of any phase → ``timeout``; a failed TLS handshake → ``tls``; a refused, reset or
    dropped connection → ``connect``; an unusable URL → ``rejected``.
    """
    if isinstance(exc, httpx.TimeoutException):
        return ErrorCode.TIMEOUT
    if isinstance(exc, httpx.UnsupportedProtocol):
        return ErrorCode.REJECTED
    if _is_tls(exc):
        return ErrorCode.TLS
    if isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError):
        return ErrorCode.CONNECT
    return ErrorCode.INTERNAL


def parse_retry_after(value: str | None, now: datetime) -> timedelta | None:
    """A ``Retry-After`` header (delay-seconds or an HTTP-date) as a wait from ``now``,
    capped at :data:`MAX_RETRY_AFTER`; ``None`` when absent or unreadable, zero when past."""
    if value is None or not (text := value.strip()):
        return None
    if text.isascii() and text.isdigit():
        wait = timedelta(seconds=int(text)) if len(text) <= 12 else MAX_RETRY_AFTER
    else:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # "-0000": RFC 5322's "UTC, origin unknown"
            when = when.replace(tzinfo=UTC)
        wait = max(when - now, timedelta(0))
    return min(wait, MAX_RETRY_AFTER)


def post(
    client: httpx.Client,
    url: str,
    *,
    content: bytes,
    headers: dict[str, str],
    timeout: timedelta,
    read_limit: int = _DRAIN_LIMIT,
) -> Reply | ErrorCode:
    """One POST within one total ``timeout``; a :class:`Reply` (its body's first
    ``read_limit`` bytes) when the destination answered, else the transport's code."""
    try:
        with (
            deadline(timeout),
            client.stream(
                "POST", url, content=content, headers=headers, timeout=timeout.total_seconds()
            ) as response,
        ):
            head = bytearray()
            complete = True
            for chunk in response.iter_raw():
                head += chunk
                if len(head) > read_limit:
                    complete = False
                    break  # the connection is closed instead of reused; nothing is kept
            retry_after = response.headers.get("retry-after")
            return Reply(response.status_code, retry_after, bytes(head[:read_limit]), complete)
    except httpx.HTTPError as exc:
        return classify_error(exc)
    except httpx.InvalidURL:
        return ErrorCode.REJECTED
