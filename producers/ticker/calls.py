"""The governed tool calls of the poll ticker's steps, and the answers held until their ticks
commit (DESIGN.md §10).

Owns :class:`GovernedCalls`: per watcher the grant rechecked and the budget applied (``guard``),
the allowed calls run concurrently, and every answer held until a tick transaction commits, so
a failover or resync never calls a tool twice for one instant. Leaves out planning and writing
ticks (``loop``), the checks (``guard``) and the tools.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from pipeline.records.watcher import Watch
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.outcomes import ErrorCode
from pipeline.rules.ticker import WatcherPlan
from pipeline.runtime.views import GrantIndex
from producers.ticker.guard import ToolGuard, tool_request
from producers.ticker.metrics import TickerMetrics
from producers.ticker.tools import ToolRegistry, ToolRequest, ToolResult

__all__ = ["CallKey", "GovernedCalls", "Planned"]

CallKey = tuple[str, int, str, datetime]  # watcher key, version, tick kind, scheduled instant


class Planned(Protocol):
    """One watcher's plan for this step (``loop._Work``): its answers go into ``results``."""

    key: str
    watch: Watch
    plan: WatcherPlan
    budget: BudgetVerdict
    results: dict[int, ToolResult]


class GovernedCalls:
    """Makes the due calls; holds their answers until a tick transaction commits.

    Withheld by the guard → ``rejected``, no call, no data read. A transaction that does not commit
    (aborted, fenced, its outcome unknown and the ticker resynced) leaves the same instants to be
    planned again, and their calls — the same watcher, definition version, tick kind and instant —
    get the held answers back instead of calling the tool twice. A committed instant is not planned
    again; one that was not planned in it calls its tool afresh.
    """

    def __init__(self, guard: ToolGuard, tools: ToolRegistry, metrics: TickerMetrics) -> None:
        self._guard = guard
        self._tools = tools
        self._metrics = metrics
        self._held: dict[CallKey, ToolResult] = {}

    @property
    def held(self) -> int:
        return len(self._held)

    def make(self, work: Iterable[Planned], grants: GrantIndex | None, now: datetime) -> int:
        """Fill each poll tick's answer in ``work``; returns how many tools were called."""
        requests: list[ToolRequest] = []
        slots: list[tuple[Planned, int, CallKey]] = []
        for item in work:
            poll = [i for i, tick in enumerate(item.plan.ticks) if tick.calls_tool]
            if not poll:
                continue
            definition = item.watch.definition
            mine = () if grants is None else grants.of(definition.tenant_id, definition.user_id)
            withheld = self._guard.withheld(item.watch, item.budget, mine, now)
            for index in poll:
                tick = item.plan.ticks[index]
                call = (item.key, item.watch.version, tick.kind.value, tick.scheduled_at)
                held = self._held.get(call)
                if withheld is not None:
                    item.results[index] = ToolResult.failed(ErrorCode.REJECTED)
                    self._metrics.guarded.labels(withheld.value).inc()
                elif held is not None:  # asked before a transaction that did not commit
                    item.results[index] = held
                    self._metrics.reused.inc()
                else:
                    requests.append(tool_request(item.watch, tick))
                    slots.append((item, index, call))
        for (item, index, call), result in zip(slots, self._tools.call_all(requests), strict=True):
            item.results[index] = result
            self._held[call] = result
        return len(requests)

    def committed(self) -> None:
        """A tick transaction committed: what it carried is written, the rest is let go."""
        self._held.clear()
