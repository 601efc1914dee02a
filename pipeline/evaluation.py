"""The evaluator's decision: one pure function of (definition, state, evidence, grants, now).

Owns :func:`evaluate` and its result :class:`Evaluation`: outcome, reason code, next watcher
state (checkpoint advanced or not), at most one outbox entry, the receipt, and whether the
watch closes. Checks run in DESIGN.md §11's order and the first that applies decides. Reading
Kafka, charging Redis and emitting the ``close`` command are the evaluator consumer's: the
budget is asked through a callable, invoked only once every earlier check has passed, so
stale or unauthorized evidence is never charged; replay passes the recorded verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass
from datetime import datetime

from pipeline.authz import Action, AuthzDecision, Grant, authorize
from pipeline.budgets import BudgetVerdict
from pipeline.definition import Mode, WatcherDefinition
from pipeline.errors import BudgetStoreError, DefinitionError
from pipeline.evidence import Evidence, trigger_json
from pipeline.freshness import Freshness, freshness, kind_matches
from pipeline.instants import utc
from pipeline.keys import delivery_key
from pipeline.lifecycle import CloseReason, WatcherStatus, close_event, transition
from pipeline.outbox import OutboxEntry, build_entry
from pipeline.outcomes import Outcome, Reason
from pipeline.privacy import filter_payload
from pipeline.receipts import Receipt
from pipeline.sources import EventSource, PollingSource, ScheduleSource
from pipeline.watcher_state import Checkpoint, WatcherState

__all__ = ["BudgetGate", "Evaluation", "evaluate", "recorded_budget"]

BudgetGate = Callable[[Evidence], BudgetVerdict]
"""Charges one evaluation (and the evidence's tool usage) against the watcher's budget."""

_NOTE_DENIED_EVERY = "authorization failed; replay from the watcher's cursor to recover"
_NOTE_DENIED_ONCE = "access revoked: watch cancelled before data was read"
_NOTE_DUPLICATE = "trigger already applied to this version: no second outbox entry"


@dataclass(frozen=True, slots=True)
class Evaluation:
    outcome: Outcome
    reason: Reason
    next_state: WatcherState
    outbox: OutboxEntry | None
    receipt: Receipt
    close: CloseReason | None = None


def recorded_budget(verdict: BudgetVerdict) -> BudgetGate:
    """A gate that answers what a receipt recorded: replay never touches Redis."""

    def gate(_evidence: Evidence) -> BudgetVerdict:
        return verdict

    return gate


@dataclass(frozen=True, slots=True)
class _Step:
    """What one check decided, before the state and receipt are built."""

    outcome: Outcome
    reason: Reason
    advance: bool = True
    close: CloseReason | None = None
    authz: AuthzDecision | None = None
    budget: BudgetVerdict | None = None
    keep_payload: bool = False
    note: str = ""


def evaluate(
    definition: WatcherDefinition,
    state: WatcherState,
    evidence: Evidence,
    grants: Iterable[Grant],
    now: datetime,
    budget: BudgetGate,
    *,
    evaluators: Set[str] = frozenset(),
) -> Evaluation:
    """Decide ``evidence`` for one watcher version at ``now``.

    ``evaluators`` are the pinned ``key@version`` tools this process has registered; a polling
    watcher whose tool is missing yields ``evaluator_missing``. A budget store that cannot
    answer raises :class:`BudgetStoreError`: the caller defers (aborts and retries) rather than
    evaluate unbudgeted.
    """
    if definition.version is None:
        raise DefinitionError("an evaluated definition has an assigned version", "version")
    now = utc(now)
    key = delivery_key(
        tenant_id=definition.tenant_id,
        user_id=definition.user_id,
        watcher_id=definition.watcher_id,
        watcher_version=definition.version,
        source_id=definition.source_id,
        trigger=evidence.trigger(),
    )
    step = _decide(definition, state, evidence, grants, now, budget, evaluators)
    step = _final_at_deadline(definition, state, evidence, now, step)
    duplicate = step.reason is Reason.CONDITION_TRUE and state.applied(key)
    entry = None
    if step.reason is Reason.CONDITION_TRUE and not duplicate:
        entry = build_entry(definition, evidence, key, now)
    note = _NOTE_DUPLICATE if duplicate else step.note
    receipt = _receipt(definition, evidence, key, now, step, entry, note)
    next_state = _next_state(state, evidence, key, step)
    return Evaluation(step.outcome, step.reason, next_state, entry, receipt, step.close)


def _decide(
    definition: WatcherDefinition,
    state: WatcherState,
    evidence: Evidence,
    grants: Iterable[Grant],
    now: datetime,
    budget: BudgetGate,
    evaluators: Set[str],
) -> _Step:
    status = state.status
    if status not in (WatcherStatus.ACTIVE, WatcherStatus.PAUSED):
        return _Step(Outcome.NONE, Reason.NOT_ACTIVE)
    if _expired(definition, state, evidence, now):
        return _Step(Outcome.NONE, Reason.EXPIRED, close=CloseReason.EXPIRED)
    if status is WatcherStatus.PAUSED:
        return _Step(Outcome.NONE, Reason.NOT_ACTIVE)

    source = definition.source
    decision = authorize(
        grants,
        tenant_id=definition.tenant_id,
        user_id=definition.user_id,
        purpose=definition.purpose,
        action=Action.EVALUATE,
        source_id=definition.source_id,
        tool=source.governed_tool if isinstance(source, PollingSource) else None,
        now=now,
    )
    if not decision.allowed:
        if definition.mode is Mode.ONCE:
            return _Step(
                Outcome.NONE,
                Reason.AUTHORIZATION_DENIED,
                advance=False,
                close=CloseReason.ACCESS_REVOKED,
                authz=decision,
                note=_NOTE_DENIED_ONCE,
            )
        return _Step(
            Outcome.NONE,
            Reason.AUTHORIZATION_DENIED,
            advance=False,
            authz=decision,
            note=_NOTE_DENIED_EVERY,
        )

    unavailable = Outcome.UNAVAILABLE
    if not _source_matches(definition, evidence):
        return _Step(unavailable, Reason.SOURCE_MISMATCH, authz=decision)
    fresh = freshness(evidence, source.max_age, now)
    if fresh is Freshness.STALE:
        return _Step(unavailable, Reason.STALE, authz=decision)
    if fresh is Freshness.FUTURE_SKEW:
        return _Step(unavailable, Reason.FUTURE_SKEW, authz=decision)

    verdict = budget(evidence)
    if verdict is BudgetVerdict.UNAVAILABLE:
        raise BudgetStoreError("budget store unavailable: defer this evaluation")
    if verdict is BudgetVerdict.EXHAUSTED:
        return _Step(unavailable, Reason.BUDGET_EXHAUSTED, authz=decision, budget=verdict)
    if isinstance(source, PollingSource) and source.tool not in evaluators:
        return _Step(unavailable, Reason.EVALUATOR_MISSING, authz=decision, budget=verdict)
    if evidence.tool_error is not None:
        return _Step(unavailable, Reason.TOOL_ERROR, authz=decision, budget=verdict)
    return _judge(definition, evidence, decision, verdict)


def _judge(
    definition: WatcherDefinition,
    evidence: Evidence,
    decision: AuthzDecision,
    verdict: BudgetVerdict,
) -> _Step:
    """Condition and terminal condition. Terminal wins a tie: never a false success signal."""
    payload = evidence.payload
    holds = definition.predicate(payload)
    terminal = definition.terminal_predicate
    is_terminal = terminal is not None and terminal(payload)
    if is_terminal:
        outcome, reason = Outcome.TERMINAL_UNSATISFIED, Reason.TERMINAL_CONDITION
        close: CloseReason | None = CloseReason.TERMINAL_UNSATISFIED
    elif holds:
        outcome, reason = Outcome.SATISFIED, Reason.CONDITION_TRUE
        closes = definition.mode is Mode.ONCE or _one_shot(definition)
        close = CloseReason.SATISFIED if closes else None
    else:
        outcome, reason, close = Outcome.PENDING, Reason.CONDITION_FALSE, None
    return _Step(outcome, reason, close=close, authz=decision, budget=verdict, keep_payload=True)


def _one_shot(definition: WatcherDefinition) -> bool:
    """A one-shot schedule (``at``) is done once it fired."""
    source = definition.source
    return isinstance(source, ScheduleSource) and source.at is not None


def _evidence_instant(evidence: Evidence, now: datetime) -> datetime:
    """The instant evidence stands for: a tick's scheduled instant, else evaluation time."""
    return evidence.scheduled_at if evidence.scheduled_at is not None else now


def _expired(
    definition: WatcherDefinition, state: WatcherState, evidence: Evidence, now: datetime
) -> bool:
    """Past the deadline. An active watch still gets its final evaluation *at* the deadline
    (the ticker's tick scheduled exactly then); a paused one just expires there.
    """
    deadline = definition.deadline(state.activated_at)
    if deadline is None:
        return False
    at = _evidence_instant(evidence, now)
    if state.status is WatcherStatus.PAUSED:
        return at >= deadline
    return at > deadline


def _final_at_deadline(
    definition: WatcherDefinition,
    state: WatcherState,
    evidence: Evidence,
    now: datetime,
    step: _Step,
) -> _Step:
    """After the final evaluation at the deadline, a watch that did not close expires."""
    deadline = definition.deadline(state.activated_at)
    if deadline is None or step.close is not None or step.outcome is Outcome.NONE:
        return step
    if _evidence_instant(evidence, now) < deadline:
        return step
    return _Step(
        step.outcome,
        step.reason,
        advance=step.advance,
        close=CloseReason.EXPIRED,
        authz=step.authz,
        budget=step.budget,
        keep_payload=step.keep_payload,
        note="final evaluation at the deadline",
    )


def _source_matches(definition: WatcherDefinition, evidence: Evidence) -> bool:
    """Kind and source id (events: the type too); a tick must name this very watcher."""
    source = definition.source
    if not kind_matches(evidence, source.kind) or evidence.source_id != definition.source_id:
        return False
    if isinstance(source, EventSource) and evidence.event_type != source.event_type:
        return False
    return evidence.watcher_key is None or evidence.watcher_key == definition.watcher_key


def _receipt(
    definition: WatcherDefinition,
    evidence: Evidence,
    key: str,
    now: datetime,
    step: _Step,
    entry: OutboxEntry | None,
    note: str,
) -> Receipt:
    assert definition.version is not None
    payload = None
    if step.keep_payload:
        payload = filter_payload(evidence.payload, definition.privacy.retain_paths)
    return Receipt(
        tenant_id=definition.tenant_id,
        user_id=definition.user_id,
        watcher_id=definition.watcher_id,
        watcher_version=definition.version,
        evaluated_at=now,
        evidence_digest=evidence.digest(),
        trigger=trigger_json(evidence.trigger()),
        trigger_key=key,
        observed_at=evidence.observed_at,
        position=evidence.position,
        outcome=step.outcome,
        reason=step.reason,
        authorized=None if step.authz is None else step.authz.allowed,
        authorization="" if step.authz is None else str(step.authz),
        budget=step.budget,
        tool_error=evidence.tool_error if step.reason is Reason.TOOL_ERROR else None,
        payload=payload,
        delivery_key=None if entry is None else entry.delivery_key,
        note=note,
    )


def _next_state(state: WatcherState, evidence: Evidence, key: str, step: _Step) -> WatcherState:
    """Advance the checkpoint (or not, §11), count the evaluation, close if decided."""
    update: dict[str, object] = {"revision": state.revision + 1}
    if step.advance:
        update["checkpoint"] = Checkpoint(
            trigger_key=key,
            trigger=trigger_json(evidence.trigger()),
            observed_at=evidence.observed_at,
            position=evidence.position,
        )
        update["recent_triggers"] = state.remember(key)
        update["last_outcome"] = step.outcome
        update["last_reason"] = step.reason
    if step.outcome is not Outcome.NONE:
        update["evaluations"] = state.evaluations + 1
    if step.close is not None:
        update["status"] = transition(state.status, close_event(step.close))
        update["closed_reason"] = step.close
    elif not step.advance:
        return state  # authorization denied (every): no transition at all
    return state.model_copy(update=update)
