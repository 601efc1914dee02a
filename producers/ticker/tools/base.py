"""Governed tools: what a call asks and answers, and the registry that runs calls safely.

Owns :class:`ToolRequest`, :class:`ToolResult` (a JSON object payload *or* a categorical
:class:`ErrorCode`, plus usage), the :class:`Tool` protocol and :class:`ToolRegistry` (exact
``key@vN`` lookup, timeouts, a concurrency limit, metrics, one deadline per call). Leaves out who
may call (the ticker checks first) and the tools themselves (``http_json``, ``pinned``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
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
    def create(cls, metrics_registry: CollectorRegistry = REGISTRY) -> ToolMetrics:
        return cls(
            latency=Histogram(
                "vigil_tool_latency_seconds",
                "Governed tool call latency, by pinned tool.",
                ["tool"],
                registry=metrics_registry,
            ),
            errors=Counter(
                "vigil_tool_errors_total",
                "Governed tool calls that failed, by pinned tool and categorical code.",
                ["tool", "code"],
                registry=metrics_registry,
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


class _Call:
    """One tool call on its way through a worker; answered once, by the worker or the clock."""

    __slots__ = ("done", "index", "lock", "request", "result", "started", "tool", "worker")

    def __init__(self, tool: Tool, request: ToolRequest, index: int) -> None:
        self.tool = tool
        self.request = request
        self.index = index
        self.lock = threading.Lock()
        self.started: float | None = None
        self.worker: _Worker | None = None
        self.result: ToolResult | None = None
        self.done = False  # answered: by the tool, or by the clock (then abandoned)


class _Worker(threading.Thread):
    """A daemon thread running calls from the registry's queue until it is retired: a worker
    whose call was abandoned finishes that call on its own and then ends (a replacement has
    taken its place), so a stuck call never holds a worker the registry counts on."""

    def __init__(self, registry: ToolRegistry) -> None:
        super().__init__(name="vigil-tool", daemon=True)
        self._registry = registry
        self.retired = False

    def run(self) -> None:
        jobs = self._registry._jobs
        while True:
            item = jobs.get()
            if item is None:
                return
            call, answers = item
            with call.lock:
                if call.done:  # answered by the clock before it started
                    continue
                call.worker = self
                call.started = time.monotonic()
            result = ToolRegistry._run(call.tool, call.request, call.started)
            with call.lock:
                late = call.done
                call.done, call.result = True, result
            if not late:
                answers.put(call)
            if self.retired:
                self._registry._ended()
                return


class ToolRegistry:
    """Pinned ``key@vN`` → implementation; runs calls with a timeout and a concurrency limit.

    Calls run on ``concurrency`` daemon worker threads (tools do blocking I/O). Every call has
    one deadline, its tool's timeout, counted from when a worker starts it: past it the call is
    answered ``timeout`` and abandoned, its worker is retired once the call returns and a new
    worker takes its place at once, so a stuck call never blocks the next call or the next
    tick. At most :attr:`max_abandoned` abandoned calls may still be running; beyond that the
    tool is plainly broken and further calls are answered ``unavailable`` without starting.

    An unregistered version is ``unavailable``, never another version. One deadline per call that no
    tool can stretch: a stuck call is abandoned and its worker replaced, so it never blocks the next
    tick. A tool that raises or answers out of contract becomes ``internal``; nothing a tool says
    beyond its code is kept.
    """

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        metrics: ToolMetrics | None = None,
        max_abandoned: int | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._tools: dict[str, Tool] = {}
        self._concurrency = concurrency
        self.max_abandoned = 4 * concurrency if max_abandoned is None else max_abandoned
        self._jobs: queue.SimpleQueue[tuple[_Call, queue.SimpleQueue[_Call]] | None] = (
            queue.SimpleQueue()
        )
        self._workers = 0
        self._abandoned = 0
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

    @property
    def abandoned(self) -> int:
        """Abandoned calls whose threads are still running."""
        with self._lock:
            return self._abandoned

    def call(self, request: ToolRequest) -> ToolResult:
        return self.call_all([request])[0]

    def call_all(self, requests: Sequence[ToolRequest]) -> list[ToolResult]:
        """Answer every request, in order; at most ``concurrency`` run at once. Returns within
        the tools' timeouts whatever the tools do."""
        results: list[ToolResult | None] = [None] * len(requests)
        answers: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        pending: dict[int, _Call] = {}
        for index, request in enumerate(requests):
            tool = self._tools.get(request.tool)
            if tool is None or self.abandoned >= self.max_abandoned:
                results[index] = ToolResult.failed(ErrorCode.UNAVAILABLE)
                continue
            call = pending[index] = _Call(tool, request, index)
            self._jobs.put((call, answers))
        if pending:
            self._staff()
        while pending:
            try:
                call = answers.get(timeout=_WAIT_SLICE_S)
                if pending.pop(call.index, None) is not None and call.result is not None:
                    results[call.index] = call.result
            except queue.Empty:
                pass
            now = time.monotonic()
            for index, call in list(pending.items()):
                if self._expired(call, now):
                    del pending[index]
                    assert call.started is not None
                    results[index] = ToolResult(
                        None, ErrorCode.TIMEOUT, latency_s=now - call.started
                    )
                    log.warning(
                        "tool %s timed out after %.1fs", call.request.tool, now - call.started
                    )
        final = [r if r is not None else ToolResult.failed(ErrorCode.INTERNAL) for r in results]
        self._observe(requests, final)
        return final

    def close(self) -> None:
        """Stop the idle workers (running calls finish on their own daemon threads)."""
        with self._lock:
            count, self._workers = self._workers, 0
        for _ in range(count):
            self._jobs.put(None)

    def _expired(self, call: _Call, now: float) -> bool:
        """Answer ``call`` by the clock if it ran past its deadline (and replace its worker)."""
        with call.lock:
            if call.done or call.started is None:
                return False
            if now - call.started <= call.tool.timeout.total_seconds():
                return False
            call.done = True
            worker = call.worker
        if worker is not None:
            worker.retired = True
            with self._lock:
                self._abandoned += 1
                self._workers -= 1
            self._staff()
        return True

    def _staff(self) -> None:
        """Start workers until ``concurrency`` of them serve the queue."""
        with self._lock:
            missing = self._concurrency - self._workers
            self._workers += max(0, missing)
        for _ in range(missing):
            _Worker(self).start()

    def _ended(self) -> None:
        """A retired worker finished its abandoned call."""
        with self._lock:
            self._abandoned -= 1

    @staticmethod
    def _run(tool: Tool, request: ToolRequest, began: float) -> ToolResult:
        try:
            result = _checked(tool.call(request))
        except Exception:
            log.exception("tool %s raised", request.tool)
            result = ToolResult.failed(ErrorCode.INTERNAL)
        return ToolResult(
            result.payload, result.error, result.tokens, result.micro_usd, time.monotonic() - began
        )

    def _observe(self, requests: Sequence[ToolRequest], results: Sequence[ToolResult]) -> None:
        if self.metrics is None:
            return
        for request, result in zip(requests, results, strict=True):
            if request.tool in self._tools:
                self.metrics.latency.labels(request.tool).observe(result.latency_s)
            if result.error is not None:
                self.metrics.errors.labels(request.tool, result.error.value).inc()
