"""One Redis client from ``[redis] url``, whichever shape the deployment's Redis has.

Owns :func:`connect` (one server, ``redis+cluster://`` or ``redis+sentinel://``; the same short
socket timeouts for every client, so an outage is a quick error, never a stall; the password
never in an error) and :func:`is_cluster`. Leaves out what is stored (``budgets``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

__all__ = ["SCHEMES", "RedisUrl", "connect", "is_cluster", "parse_url"]

SCHEMES: Final = frozenset(
    {
        "redis",
        "rediss",
        "unix",
        "redis+cluster",
        "rediss+cluster",
        "redis+sentinel",
        "rediss+sentinel",
    }
)


@dataclass(frozen=True, slots=True)
class RedisUrl:
    """A cluster or Sentinel URL, taken apart (single-server URLs stay redis-py's)."""

    kind: str  # "cluster" | "sentinel"
    tls: bool
    hosts: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    service: str | None  # Sentinel: the master's name
    db: int


def parse_url(url: str) -> RedisUrl:
    """``redis+cluster://`` and ``redis+sentinel://`` URLs; :class:`ValueError` naming what
    is wrong (never the password) otherwise."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES or "+" not in scheme:
        raise ValueError("expected a redis+cluster:// or redis+sentinel:// URL")
    base, kind = scheme.split("+", 1)
    netloc, _, path = rest.partition("/")
    userinfo, at, hostlist = netloc.rpartition("@")
    if not at:
        hostlist, userinfo = netloc, ""
    username, colon, password = userinfo.partition(":")
    hosts = []
    for item in hostlist.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{kind} URL: expected host:port[,host:port…], got {item[:100]!r}")
        hosts.append((host.strip("[]"), int(port)))
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    service = None
    db = 0
    if kind == "sentinel":
        if not parts:
            raise ValueError("sentinel URL: expected /<service name>[/<db>] after the hosts")
        service = unquote(parts[0])
        parts = parts[1:]
    if parts:
        if not parts[0].isdigit():
            raise ValueError(f"{kind} URL: the database is a number")
        db = int(parts[0])
    if kind == "cluster" and db != 0:
        raise ValueError("cluster URL: a Redis Cluster has database 0 only")
    return RedisUrl(
        kind,
        base == "rediss",
        tuple(hosts),
        unquote(username) or None,
        unquote(password) if colon else None,
        service,
        db,
    )


def connect(url: str, *, timeout_s: float = 2.0, retry: Any = None) -> Any:
    """A client for ``url`` (see the module docstring); no network until its first command.
    ``retry``: a redis-py ``Retry`` (None: the library's default).

    URL forms: ``redis://[[user]:password@]host:port/db``, ``rediss://…``, ``unix:///path?db=0``
    (one server); ``redis+cluster://[[user]:password@]host:port[,host:port…]``
    (``rediss+cluster://`` for TLS), a Redis Cluster found from any listed node;
    ``redis+sentinel://[[user]:password@]host:port[,host:port…]/service[/db]``, the master Sentinel
    names for ``service``, looked up again after a failover.
    """
    options: dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    if retry is not None:
        options["retry"] = retry
    if "+" not in url.partition("://")[0]:
        return redis.Redis.from_url(url, **options)
    parsed = parse_url(url)
    auth: dict[str, Any] = {"username": parsed.username, "password": parsed.password}
    if parsed.kind == "cluster":
        nodes = [ClusterNode(host, port) for host, port in parsed.hosts]  # type: ignore[no-untyped-call, unused-ignore]
        return RedisCluster(startup_nodes=nodes, ssl=parsed.tls, **auth, **options)
    if parsed.tls:
        options["ssl"] = True
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(parsed.hosts),
        sentinel_kwargs={"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s},
        **auth,
        **options,
    )
    assert parsed.service is not None
    return sentinel.master_for(parsed.service, db=parsed.db)  # type: ignore[no-untyped-call, unused-ignore]


def is_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster)
