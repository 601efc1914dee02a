"""What the poll ticker checks before it calls a governed tool, and the call it then makes.

Owns :class:`ToolGuard` (the evaluation budget read, not charged — the evaluator charges when it
evaluates the tick — and the grant rechecked fail-closed at ``now``) and :func:`tool_request`.
Leaves out what a withheld call becomes (``loop`` writes the tick with ``tool_error =
rejected``) and the rules (``pipeline.rules.authz``, ``pipeline.rules.budgets``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum

from pipeline.records.watcher import Watch
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.authz import Grant
from pipeline.rules.budgets import (
    NO_CEILINGS,
    BudgetCaps,
    BudgetCeilings,
    BudgetScope,
    BudgetVerdict,
    Dimension,
    check,
    resolve_caps,
)
from pipeline.rules.errors import BudgetStoreError
from pipeline.rules.evaluation import authorization_for
from pipeline.rules.sources import PollingSource
from pipeline.rules.ticker import DueTick
from producers.ticker.tools import ToolRequest

__all__ = ["ToolGuard", "Withheld", "tool_request"]


class Withheld(StrEnum):
    """Why a due tool call was not made (metrics label)."""

    AUTHORIZATION_DENIED = "authorization_denied"
    BUDGET_EXHAUSTED = "budget_exhausted"
    BUDGET_UNAVAILABLE = "budget_unavailable"  # the tick is deferred, not written


class ToolGuard:
    """Grant and budget checks for one watcher's due tool calls."""

    def __init__(
        self,
        budgets: RedisBudgets | None,
        default_caps: BudgetCaps | None,
        ceilings: BudgetCeilings = NO_CEILINGS,
    ) -> None:
        self._budgets = budgets
        self._default_caps = default_caps
        self._ceilings = ceilings
        self._down = False

    def begin_step(self) -> None:
        """Ask the store again: a failure answers ``unavailable`` for the rest of one step, so
        an outage costs one timeout per step, not one per watcher."""
        self._down = False

    def budget(self, watch: Watch, now: datetime) -> BudgetVerdict:
        """Would one more evaluation fit ``now``'s window? ``unavailable`` if Redis is down."""
        if self._down:
            return BudgetVerdict.UNAVAILABLE
        definition = watch.definition
        caps = self._default_caps
        if caps is not None:
            caps = resolve_caps(definition.budgets, caps, self._ceilings)
        elif definition.budgets is not None:
            caps = self._ceilings.clamp(definition.budgets)
        if caps is None or self._budgets is None:
            return BudgetVerdict.OK
        try:
            used = self._budgets.usage(BudgetScope(*watch.parts), caps, now)
        except BudgetStoreError:
            self._down = True
            return BudgetVerdict.UNAVAILABLE
        return check(caps, used, {Dimension.EVALUATIONS: 1}).verdict

    @staticmethod
    def withheld(
        watch: Watch, budget: BudgetVerdict, grants: Iterable[Grant], now: datetime
    ) -> Withheld | None:
        """Why this watcher's tool must not be called now, or None: the grant first, then the
        budget read earlier in the step."""
        assert isinstance(watch.definition.source, PollingSource)
        if not authorization_for(watch.definition, grants, now).allowed:
            return Withheld.AUTHORIZATION_DENIED
        if budget is BudgetVerdict.EXHAUSTED:
            return Withheld.BUDGET_EXHAUSTED
        return None


def tool_request(watch: Watch, tick: DueTick) -> ToolRequest:
    """The call of ``watch``'s pinned tool for one due poll tick."""
    definition = watch.definition
    source = definition.source
    assert isinstance(source, PollingSource)
    return ToolRequest(
        tool=source.tool,
        tenant_id=definition.tenant_id,
        user_id=definition.user_id,
        watcher_id=definition.watcher_id,
        source_id=definition.source_id,
        scheduled_at=tick.scheduled_at,
        tool_ref=source.tool_ref,
        target=source.target,
        session_id=definition.session_id,
    )
