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
from redis.backoff import NoBackoff
from redis.retry import Retry

from pipeline.redis.connect import connect, parse_url
from pipeline.rules.errors import UnavailableError

__all__ = ["PROBE_TIMEOUT_S", "REDIS_KEY", "probe_redis", "redacted"]

PROBE_TIMEOUT_S: Final = 2.5
REDIS_KEY: Final = "[redis] url"


def redacted(url: str) -> str:
    """``scheme://host:port/db`` of ``url``: no user name, no password, no query."""
    if "+" in url.partition("://")[0]:
        try:
            parsed = parse_url(url)
        except ValueError:
            return "(an unparsable Redis URL)"
        hosts = ",".join(f"{h}:{p}" for h, p in parsed.hosts)
        scheme = url.partition("://")[0]
        return f"{scheme}://{hosts}/{parsed.service or ''}".rstrip("/")
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
        client = connect(url, timeout_s=timeout_s, retry=Retry(NoBackoff(), 0))
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
    if isinstance(info, dict) and "redis_version" not in info:  # a cluster: info per node
        info = next((v for v in info.values() if isinstance(v, dict)), {})
    return str(info.get("redis_version", "unknown"))
