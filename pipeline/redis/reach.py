"""Whether Redis answers, asked once and quickly before a process relies on it.

:func:`probe_redis` pings the server of ``[redis] url`` with a short deadline and answers its
version, or raises one :class:`~pipeline.rules.errors.UnavailableError` naming the address (never
the password), the key and the fix. :func:`redacted` is the one way a Redis URL is shown.

Leaves out Redis going away later: budget calls then defer (``pipeline.redis.budgets``).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

import redis

from pipeline.rules.errors import UnavailableError

__all__ = ["PROBE_TIMEOUT_S", "REDIS_KEY", "probe_redis", "redacted"]

PROBE_TIMEOUT_S: Final = 2.5
REDIS_KEY: Final = "[redis] url"


def redacted(url: str) -> str:
    """``scheme://host:port/db`` of ``url``: no user name, no password, no query."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        host = parts.hostname or ""
    except ValueError:
        return "(an unparsable Redis URL)"
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def probe_redis(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """The server's version, or :class:`UnavailableError` within about ``timeout_s``."""
    try:
        client = redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=None
        )
    except (ValueError, redis.RedisError) as exc:
        raise UnavailableError(
            "Redis", redacted(url), REDIS_KEY, "fix the URL", detail=type(exc).__name__
        ) from None
    try:
        info = client.info("server")
    except redis.RedisError as exc:
        raise UnavailableError(
            "Redis",
            redacted(url),
            REDIS_KEY,
            "start one with `vigil dev`",
            detail=type(exc).__name__,
        ) from None
    finally:
        client.close()
    return str(info.get("redis_version", "unknown"))
