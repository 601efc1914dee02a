"""Due entries' pre-dispatch decisions, with their verdicts gathered from the live views.

Owns :class:`Planner`: for a due entry, the lifecycle verdict, authorization rechecked against
the current grants, quiet hours and the budget charge (idempotent per delivery key + attempt,
many per Redis round trip) for :func:`pipeline.rules.dispatch.plan_attempt`; Redis unreachable
is a verdict (defer), never an error. Leaves out persistence, sending and the rules.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from pipeline.records.delivery_state import DeliveryRecord
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.authz import Action, AuthzDecision, authorize
from pipeline.rules.budgets import (
    NO_CEILINGS,
    BudgetCaps,
    BudgetCeilings,
    BudgetCheck,
    BudgetScope,
    Charge,
    Dimension,
    resolve_caps,
    window_end,
)
from pipeline.rules.dispatch import (
    BUDGET_UNAVAILABLE_RETRY,
    DispatchAction,
    DispatchPlan,
    attempt_cost,
    attempt_token_for,
    plan_attempt,
)
from pipeline.rules.errors import BudgetStoreError
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.quiet_hours import QuietHours
from pipeline.runtime.views import GrantIndex, LifecycleIndex

__all__ = ["Decision", "Pending", "Planner"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Decision:
    plan: DispatchPlan
    detail: str | None = None  # categorical: a deny reason, the exhausted budget dimension


@dataclass(frozen=True, slots=True)
class Pending:
    """A decision waiting for its budget charge (the verdicts gathered so far)."""

    record: DeliveryRecord
    entry: OutboxEntry
    now: datetime
    quiet: QuietHours | None
    window_end: datetime
    charge: Charge


class Planner:
    """Decides attempts; holds the views and the budget store, never state.

    Two phases, so the budget charges of many due entries share one Redis round trip:
    :meth:`prepare` decides what needs no budget (cancel, suppress, quiet hours) or returns a
    :class:`Pending`; :meth:`charge` charges a batch; :meth:`complete` finishes each.

    Nothing is charged for an attempt that is deferred, suppressed or cancelled before the charge;
    the plan carries a categorical detail for the audit record.
    """

    def __init__(
        self,
        *,
        grants: GrantIndex,
        lifecycle: LifecycleIndex,
        budgets: RedisBudgets,
        budget_defaults: BudgetCaps,
        budget_ceilings: BudgetCeilings = NO_CEILINGS,
        unavailable_retry: timedelta = BUDGET_UNAVAILABLE_RETRY,
        catch_up: Callable[[], None] | None = None,
    ) -> None:
        """``catch_up`` reads the global tables to their end. While :attr:`stale` (the views
        may predate an entry being decided), a denial is checked once more after it: the
        evaluator wrote the entry under a grant it read before, which this process's view,
        up to a few tens of milliseconds old, may not hold yet. A denial then stands."""
        self.stale = True
        self._catch_up = catch_up
        self._grants = grants
        self._lifecycle = lifecycle
        self._budgets = budgets
        self._defaults = budget_defaults
        self._ceilings = budget_ceilings
        self._unavailable_retry = unavailable_retry

    def caps(self, entry: OutboxEntry) -> BudgetCaps:
        """The entry's caps with the operator's defaults for what it leaves out, each at most
        its ceiling."""
        return resolve_caps(entry.budgets, self._defaults, self._ceilings)

    def prepare(
        self, record: DeliveryRecord, entry: OutboxEntry, now: datetime
    ) -> Decision | Pending:
        """Checks 1-3 of ``plan_attempt`` (lifecycle, authorization, quiet hours), or what
        the budget charge needs."""
        closed = self._lifecycle.dropping(record, entry.created_at) is not None
        verdict = self._authorized(entry, now)
        if not verdict.allowed and self.stale and self._catch_up is not None:
            self._catch_up()  # a grant newer than the view: read to the end, then decide
            self._grants.refresh()
            self.stale = False
            verdict = self._authorized(entry, now)
        quiet = entry.quiet_hours
        caps = self.caps(entry)
        ends = window_end(now, caps.window)
        plan = plan_attempt(
            record.state,
            now=now,
            authorized=verdict.allowed,
            quiet_hours=quiet,
            attempt_budget=None,
            closed=closed,
            window_end=ends,
            unavailable_retry=self._unavailable_retry,
        )
        if plan.action is not DispatchAction.CHARGE_BUDGET:
            denied = None if verdict.reason is None else verdict.reason.value
            return Decision(plan, denied if plan.action is DispatchAction.SUPPRESS else None)
        scope = BudgetScope(entry.tenant_id, entry.user_id, entry.watcher_id)
        charge = Charge(scope, caps, attempt_cost(record.state), attempt_token_for(record.state))
        return Pending(record, entry, now, quiet, ends, charge)

    def _authorized(self, entry: OutboxEntry, now: datetime) -> AuthzDecision:
        return authorize(
            self._grants.of(entry.tenant_id, entry.user_id),
            tenant_id=entry.tenant_id,
            user_id=entry.user_id,
            purpose=entry.purpose,
            action=Action.DELIVER,
            source_id=entry.source_id,
            target=entry.target,
            now=now,
        )

    def charge(self, pending: Sequence[Pending]) -> list[BudgetCheck]:
        """Charge a batch in one round trip; Redis unreachable makes every verdict
        ``unavailable`` (defer, never send unbudgeted)."""
        if not pending:
            return []
        try:
            return self._budgets.charge_many([p.charge for p in pending], pending[0].now)
        except BudgetStoreError as exc:
            log.warning("budget store unavailable, deferring %d entries: %s", len(pending), exc)
            return [BudgetCheck.unavailable() for _ in pending]

    def complete(self, pending: Pending, check: BudgetCheck) -> Decision:
        """Checks 5-8 of ``plan_attempt`` with the charge's verdict."""
        plan = plan_attempt(
            pending.record.state,
            now=pending.now,
            authorized=True,
            quiet_hours=pending.quiet,
            attempt_budget=check.verdict_for(Dimension.ATTEMPTS),
            delivery_budget=check.verdict_for(Dimension.DELIVERIES),
            closed=False,
            window_end=pending.window_end,
            unavailable_retry=self._unavailable_retry,
        )
        detail = None if check.exhausted is None else check.exhausted.value
        return Decision(plan, None if plan.action is DispatchAction.DISPATCH else detail)
