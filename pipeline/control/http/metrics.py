"""What the HTTP API counts: requests by method, route template and status, their latency, and the
log reads it starts (``vigil_api_log_scans_total{topic}``).

Owns :class:`RequestMetrics`, a plain ASGI middleware (no body buffering) labelling each request by
its route's template, never the raw path (unmatched: ``unmatched``), so labels stay bounded. Leaves
out serving the numbers (``pipeline.ops.health``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline.runtime.metrics import per_registry

__all__ = ["ApiMetrics", "RequestMetrics", "api_metrics"]


@dataclass(frozen=True, slots=True)
class ApiMetrics:
    requests: Counter  # labels: method, route, status
    seconds: Histogram  # labels: method, route
    scans: Counter  # labels: topic


def _create(metrics_registry: CollectorRegistry) -> ApiMetrics:
    return ApiMetrics(
        requests=Counter(
            "vigil_api_requests",
            "HTTP API requests by method, route template and status code.",
            ["method", "route", "status"],
            registry=metrics_registry,
        ),
        seconds=Histogram(
            "vigil_api_request_seconds",
            "HTTP API request latency by method and route template.",
            ["method", "route"],
            registry=metrics_registry,
        ),
        scans=Counter(
            "vigil_api_log_scans",
            "Reads of a topic's partitions the API started for a request, by topic.",
            ["topic"],
            registry=metrics_registry,
        ),
    )


api_metrics = per_registry(_create)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestMetrics:
    """Count and time every HTTP request passing through."""

    def __init__(self, app: ASGIApp, *, metrics_registry: CollectorRegistry = REGISTRY) -> None:
        self._app = app
        self._metrics = api_metrics(metrics_registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def observe(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self._app(scope, receive, observe)
        finally:
            route = scope.get("route")
            template = str(getattr(route, "path", "unmatched"))
            method = str(scope.get("method", "GET"))
            method = method if method in _METHODS else "other"
            self._metrics.requests.labels(method, template, str(status[0])).inc()
            self._metrics.seconds.labels(method, template).observe(time.perf_counter() - started)
