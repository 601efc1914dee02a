"""Governed tools: what a call asks and answers, and the registry that runs calls safely.

Owns :class:`ToolRequest` (everything a tool may know: the pinned ``key@vN``, the operator's
``tool_ref`` or the evaluator's ``target``, the subject and the scheduled instant),
:class:`ToolResult` (a JSON object payload *or* a categorical :class:`ErrorCode`, plus the usage
in tokens and micro-USD that budgets charge), the :class:`Tool` protocol, and
:class:`ToolRegistry`: exact ``key@vN`` lookup (an unregistered version is ``unavailable``,
never another version), a per-tool timeout, a concurrency limit, and metrics (latency, errors by
code). A tool that raises or answers out of contract becomes ``internal``; nothing a tool says
beyond its code is kept.

Left out: who may call (the ticker rechecks grants and budgets first) and the tools themselves
(``http_json``, ``pinned``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Final, Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from pipeline.rules.outcomes import ErrorCode

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_TIMEOUT",
    "Tool",
    "ToolMetrics",
    "ToolRegistry",
    "ToolRequest",
    "ToolResult",
]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT: Final = timedelta(seconds=10)
DEFAULT_CONCURRENCY: Final = 16
_WAIT_SLICE_S: Final = 0.05


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """One call of one watcher's pinned tool for one scheduled instant."""

    tool: str  # the pinned key@vN
    tenant_id: str
    user_id: str
    watcher_id: str
    source_id: str
    scheduled_at: datetime
    tool_ref: str | None = None  # an operator-configured instance ([tools.NAME])
    target: str | None = None  # what a pinned evaluator reads (a run id, a session id)
    session_id: str | None = None  # the watch's owning session


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A JSON object, or a categorical error; usage is what budgets charge for the call."""

    payload: Mapping[str, Any] | None = None
    error: ErrorCode | None = None
    tokens: int = 0
    micro_usd: int = 0
    latency_s: float = field(default=0.0, compare=False)

    @classmethod
    def failed(cls, code: ErrorCode, **usage: int) -> ToolResult:
        return cls(None, code, **usage)

    @classmethod
    def ok(cls, payload: Mapping[str, Any], *, tokens: int = 0, micro_usd: int = 0) -> ToolResult:
        return cls(MappingProxyType(dict(payload)), None, tokens, micro_usd)


class Tool(Protocol):
    """A governed tool implementation, registered under its exact ``key@vN``."""

    @property
    def key(self) -> str: ...

    @property
    def timeout(self) -> timedelta: ...

    def call(self, request: ToolRequest) -> ToolResult: ...


@dataclass(frozen=True, slots=True)
class ToolMetrics:
    latency: Histogram  # labels: tool
    errors: Counter  # labels: tool, code

    @classmethod
    def create(cls, registry: CollectorRegistry = REGISTRY) -> ToolMetrics:
        return cls(
            latency=Histogram(
                "vigil_tool_latency_seconds",
                "Governed tool call latency, by pinned tool.",
                ["tool"],
                registry=registry,
            ),
            errors=Counter(
                "vigil_tool_errors_total",
                "Governed tool calls that failed, by pinned tool and categorical code.",
                ["tool", "code"],
                registry=registry,
            ),
        )


def _checked(result: object) -> ToolResult:
    """A tool's answer if it keeps the contract, else ``internal``."""
    if not isinstance(result, ToolResult):
        return ToolResult.failed(ErrorCode.INTERNAL)
    usage_ok = all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for v in (result.tokens, result.micro_usd)
    )
    shape_ok = (result.payload is None) != (result.error is None) and (
        result.payload is None or isinstance(result.payload, Mapping)
    )
    if not (usage_ok and shape_ok):
        return ToolResult.failed(ErrorCode.INTERNAL)
    return result


class ToolRegistry:
    """Pinned ``key@vN`` → implementation; runs calls with a timeout and a concurrency limit.

    Calls run on a private thread pool of ``concurrency`` workers (tools do blocking I/O). A call
    that outlives its tool's timeout is answered ``timeout`` and abandoned: its thread finishes
    on its own and its answer is dropped.
    """

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        metrics: ToolMetrics | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._tools: dict[str, Tool] = {}
        self._concurrency = concurrency
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.metrics = metrics
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.key in self._tools:
            raise ValueError(f"tool {tool.key} is already registered")
        self._tools[tool.key] = tool

    @property
    def keys(self) -> frozenset[str]:
        """The registered ``key@vN`` pairs: what the evaluator passes as ``evaluators``."""
        return frozenset(self._tools)

    def call(self, request: ToolRequest) -> ToolResult:
        return self.call_all([request])[0]

    def call_all(self, requests: Sequence[ToolRequest]) -> list[ToolResult]:
        """Answer every request, in order; at most ``concurrency`` run at once."""
        results: list[ToolResult | None] = [None] * len(requests)
        started: dict[int, float] = {}
        futures: dict[Future[ToolResult], int] = {}
        for index, request in enumerate(requests):
            tool = self._tools.get(request.tool)
            if tool is None:
                results[index] = ToolResult.failed(ErrorCode.UNAVAILABLE)
                continue
            futures[self._executor().submit(self._run, tool, request, index, started)] = index
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=_WAIT_SLICE_S, return_when=FIRST_COMPLETED)
            for future in done:
                results[futures[future]] = self._outcome(future)
            now = time.monotonic()
            for future in list(pending):
                index = futures[future]
                began = started.get(index)
                limit = self._tools[requests[index].tool].timeout.total_seconds()
                if began is not None and now - began > limit:
                    pending.discard(future)
                    future.cancel()
                    results[index] = ToolResult(None, ErrorCode.TIMEOUT, latency_s=now - began)
                    log.warning("tool %s timed out after %.1fs", requests[index].tool, limit)
        final = [r if r is not None else ToolResult.failed(ErrorCode.INTERNAL) for r in results]
        self._observe(requests, final)
        return final

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._concurrency, thread_name_prefix="vigil-tool")
            return self._pool

    @staticmethod
    def _run(tool: Tool, request: ToolRequest, index: int, started: dict[int, float]) -> ToolResult:
        began = started[index] = time.monotonic()
        try:
            result = _checked(tool.call(request))
        except Exception:
            log.exception("tool %s raised", request.tool)
            result = ToolResult.failed(ErrorCode.INTERNAL)
        return ToolResult(
            result.payload, result.error, result.tokens, result.micro_usd, time.monotonic() - began
        )

    @staticmethod
    def _outcome(future: Future[ToolResult]) -> ToolResult:
        try:
            return future.result()
        except Exception:  # cancelled or broken pool
            return ToolResult.failed(ErrorCode.INTERNAL)

    def _observe(self, requests: Sequence[ToolRequest], results: Sequence[ToolResult]) -> None:
        if self.metrics is None:
            return
        for request, result in zip(requests, results, strict=True):
            if request.tool in self._tools:
                self.metrics.latency.labels(request.tool).observe(result.latency_s)
            if result.error is not None:
                self.metrics.errors.labels(request.tool, result.error.value).inc()
