"""One batch of evaluations, decided with a single budget round trip.

Owns :class:`Plan` (every pair evaluated assuming ``ok``, every charge sent in one pipeline, a
watcher whose charge came back ``exhausted`` evaluated again from that step, one charge at a
time: the same result as one round trip per charge) and :func:`effective_state`. Leaves out
Kafka (``loop``) and the rules themselves (``pipeline.rules.evaluation``).
"""

from __future__ import annotations

import logging
from collections.abc import Set
from dataclasses import dataclass
from datetime import datetime

from pipeline.records.watcher import Watch
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.authz import AuthzDecision, Grant
from pipeline.rules.budgets import (
    NO_CEILINGS,
    BudgetCaps,
    BudgetCeilings,
    BudgetScope,
    BudgetVerdict,
    Charge,
    Dimension,
    offset_token,
    resolve_caps,
)
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import ErasedError, InfrastructureError
from pipeline.rules.evaluation import BudgetGate, Evaluation, authorization_for, evaluate
from pipeline.rules.evidence import Evidence
from pipeline.rules.lifecycle import is_closed
from pipeline.rules.watcher_state import WatcherState

__all__ = ["Plan", "Step", "effective_state"]

log = logging.getLogger(__name__)


def effective_state(watch: Watch, stored: WatcherState | None) -> WatcherState:
    """The state to evaluate with: the stored one of this version, with the registry's status.

    A new version starts fresh. A state the evaluator already closed stays closed even while
    the registry still says active (its ``close`` command is on the way); otherwise status and
    activation come from ``watchers``, whose writer (the command processor) owns them.
    """
    if stored is None or stored.version != watch.version:
        return WatcherState(
            version=watch.version, status=watch.status, activated_at=watch.activated_at
        )
    if is_closed(stored.status):
        return stored
    activated = watch.activated_at or stored.activated_at
    if stored.status is watch.status and stored.activated_at == activated:
        return stored
    return stored.replace(status=watch.status, activated_at=activated)


@dataclass(slots=True)
class Step:
    """One watcher's evaluation of one input. ``result`` None: not evaluated (closed, invalid)."""

    watch: Watch
    evidence: Evidence
    token: str
    state: WatcherState
    grants: tuple[Grant, ...]
    result: Evaluation | None = None
    charge: Charge | None = None
    invalid: bool = False
    erased: bool = False  # its definition's key is gone: never evaluated


class Plan:
    """The evaluations of one batch for one task partition, in input order."""

    def __init__(
        self,
        budgets: RedisBudgets,
        default_caps: BudgetCaps,
        now: datetime,
        evaluators: Set[str] = frozenset(),
        ceilings: BudgetCeilings = NO_CEILINGS,
    ) -> None:
        self._budgets = budgets
        self._default_caps = default_caps
        self._ceilings = ceilings
        self._now = now
        self._evaluators = evaluators
        self._working: dict[str, WatcherState] = {}
        self.steps: list[Step] = []

    def state_of(self, key: str) -> WatcherState | None:
        """The state a watcher has after this batch's steps so far, if it had any."""
        return self._working.get(key)

    def add(
        self,
        watch: Watch,
        state: WatcherState,
        evidence: Evidence,
        position: tuple[str, int, int],
        grants: tuple[Grant, ...],
    ) -> None:
        """Evaluate one input for one watcher, assuming its budget answers ``ok``."""
        token = f"{offset_token(*position)}:{watch.key}"
        step = Step(watch, evidence, token, state, grants)
        self.steps.append(step)
        self._run(step, self._assume_ok(step))

    def settle(self) -> list[Step]:
        """Send every recorded charge at once; redo the watchers whose budget said otherwise."""
        charged = [step for step in self.steps if step.charge is not None]
        verdicts = self._budgets.verdicts_many([s.charge for s in charged if s.charge], self._now)
        first: dict[str, Step] = {}
        for step, verdict in zip(charged, verdicts, strict=True):
            if verdict is not BudgetVerdict.OK:
                first.setdefault(step.watch.key, step)
        if first:
            self._redo(set(first), first)
        return self.steps

    def _redo(self, keys: set[str], first: dict[str, Step]) -> None:
        """Evaluate each of ``keys`` again from its ``first`` refused step, charging one by one."""
        state: dict[str, WatcherState] = {}
        started: set[str] = set()
        for step in self.steps:
            key = step.watch.key
            if key not in keys:
                continue
            if key not in started:
                if step is not first[key]:
                    continue
                started.add(key)
                state[key] = step.state
            step.state = state[key]
            step.charge = None
            step.result = None
            self._run(step, self._charge_now(step))
            if step.result is not None:
                state[key] = step.result.next_state

    def _run(self, step: Step, gate: BudgetGate) -> None:
        if is_closed(step.state.status):
            return
        try:
            definition = step.watch.definition
            step.result = evaluate(
                definition,
                step.state,
                step.evidence,
                step.grants,
                self._now,
                gate,
                evaluators=self._evaluators,
                authorization=self._authorization(step.watch, definition, step.grants),
            )
        except InfrastructureError:
            raise  # the store's failure, not the watcher's: the batch is retried
        except ErasedError as exc:
            step.invalid = step.erased = True
            log.warning("watcher %s not evaluated: %s", step.watch.key, exc)
            return
        except Exception as exc:  # this watcher's failure only: the others still decide
            step.invalid = True
            log.error("watcher %s not evaluated: %s: %s", step.watch.key, type(exc).__name__, exc)
            return
        self._working[step.watch.key] = step.result.next_state

    def _authorization(
        self, watch: Watch, definition: WatcherDefinition, grants: tuple[Grant, ...]
    ) -> AuthzDecision:
        """The watcher's last allow while it provably still holds, else a fresh decision."""
        now = self._now
        held = watch.allowed
        if held is not None and held[0] is grants and now < held[1].until:
            return held[2]
        decision = authorization_for(definition, grants, now)
        watch.allowed = None
        if decision.allowed:
            for grant in grants:
                if grant.grant_id == decision.grant_id:
                    watch.allowed = (grants, grant, decision)
                    break
        return decision

    def _charge_of(self, step: Step, evidence: Evidence) -> Charge:
        watch = step.watch
        base = watch.budget
        if base is None or base[0] is not self._default_caps:
            defaults = self._default_caps
            base = watch.budget = (
                defaults,
                BudgetScope(*watch.parts),
                resolve_caps(watch.definition.budgets, defaults, self._ceilings),
            )
        increment = {
            Dimension.EVALUATIONS: 1,
            Dimension.TOKENS: evidence.tokens,
            Dimension.MICRO_USD: evidence.micro_usd,
        }
        return Charge._make((base[1], base[2], increment, step.token))  # scope, caps, …, token

    def _assume_ok(self, step: Step) -> BudgetGate:
        def gate(evidence: Evidence) -> BudgetVerdict:
            step.charge = self._charge_of(step, evidence)
            return BudgetVerdict.OK

        return gate

    def _charge_now(self, step: Step) -> BudgetGate:
        def gate(evidence: Evidence) -> BudgetVerdict:
            return self._budgets.verdicts_many([self._charge_of(step, evidence)], self._now)[0]

        return gate
