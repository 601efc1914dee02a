"""The evaluator's decision: one pure function of (definition, state, evidence, grants, now).

Owns :func:`evaluate` (its answer, ``evaluated.Evaluation``); checks run in DESIGN.md §11's order
and the first that applies decides. The budget is a callable asked only once every earlier check
passed (replay passes the recorded verdict). On the native path ``decider`` decides the plain case
to the same answer. Kafka, Redis and emitting ``close`` are the evaluator consumer's."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Set
from datetime import datetime
from typing import Any, NamedTuple

from pipeline.rules import schedules
from pipeline.rules.authz import Action, AuthzDecision, Grant, authorize
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.change import JUDGED, PLAIN, ChangeStep, Notice, change_step
from pipeline.rules.decider import DECIDER
from pipeline.rules.definition import Mode, WatcherDefinition
from pipeline.rules.errors import BudgetStoreError, DefinitionError
from pipeline.rules.evaluated import NOTE_DUPLICATE, Evaluation
from pipeline.rules.evidence import Evidence, trigger_json
from pipeline.rules.freshness import Freshness, freshness, kind_matches
from pipeline.rules.instants import utc
from pipeline.rules.keys import delivery_key_from
from pipeline.rules.lifecycle import CloseReason, WatcherStatus, close_event, transition
from pipeline.rules.outbox import OutboxEntry, build_entry
from pipeline.rules.outcomes import Outcome, Reason
from pipeline.rules.privacy import keep_leaves
from pipeline.rules.receipts import Receipt
from pipeline.rules.sources import EventSource, PollingSource, ScheduleSource
from pipeline.rules.watcher_state import AppliedTrigger, WatcherState

__all__ = ["BudgetGate", "Evaluation", "authorization_for", "evaluate", "recorded_budget"]

BudgetGate = Callable[[Evidence], BudgetVerdict]
"""Charges one evaluation (and the evidence's tool usage) against the watcher's budget."""

_NOTE_DENIED = {
    Mode.EVERY: "authorization failed; replay from the watcher's cursor to recover",
    Mode.ONCE: "access revoked: watch cancelled before data was read",
    Mode.CHANGE: "authorization failed: nothing judged; goes on from the last known truth",
}


def recorded_budget(verdict: BudgetVerdict) -> BudgetGate:
    """A gate that answers what a receipt recorded: replay never touches Redis."""

    def gate(_evidence: Evidence) -> BudgetVerdict:
        return verdict

    return gate


class _Step(NamedTuple):
    """What one check decided, before the state and receipt are built (a tuple: one is built
    per evaluation, and a tuple is the cheapest immutable record Python has)."""

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
    authorization: AuthzDecision | None = None,
) -> Evaluation:
    """Decide ``evidence`` for one watcher version at ``now``.

    ``evaluators`` are the pinned ``key@version`` tools this process has registered; a polling
    watcher whose tool is missing yields ``evaluator_missing``. A budget store that cannot
    answer raises :class:`BudgetStoreError`: the caller defers (aborts and retries) rather than
    evaluate unbudgeted. ``authorization`` is :func:`authorization_for` of the same definition,
    grants and ``now`` when the caller already has it (the evaluator keeps an allow until its
    grant changes or ends); otherwise it is decided here.
    """
    if DECIDER is not None and authorization is not None:  # the plain case, natively
        native: Evaluation | None = DECIDER.evaluate(
            definition, state, evidence, now, budget, authorization
        )
        if native is not None:
            return native
    if definition.version is None:
        raise DefinitionError("an evaluated definition has an assigned version", "version")
    now = utc(now)
    trigger = evidence.trigger()
    key = delivery_key_from(definition.key_prefix, trigger)
    deadline = definition.deadline(state.activated_at)
    step = _decide(
        definition, state, evidence, grants, now, budget, evaluators, authorization, deadline
    )
    step = _final_at_deadline(deadline, evidence, now, step)
    close = None if step.close else schedules.one_shot_close(definition, evidence, step.reason)
    if close is not None:  # a one-shot's own fire is its last: whatever came of it, it closes
        step = step._replace(close=close, note=schedules.CLOSED_NOTE)
    moved = _change(definition, state, evidence, now, step, key)
    duplicate = step.reason is Reason.CONDITION_TRUE and state.applied(key)
    sends = step.reason is Reason.CONDITION_TRUE and not duplicate
    if moved is not None:  # a change watcher notifies on its transitions only
        step, sends = _noticed(step, moved.notice), moved.notice.sends
    identity = trigger_json(trigger)
    digest = evidence.digest()
    paths = definition.privacy.paths
    kept = keep_leaves(evidence.payload, paths) if step.keep_payload else None
    entry = None
    if sends:
        entry = build_entry(definition, evidence, key, now, identity, digest, step.outcome, kept)
    note = NOTE_DUPLICATE if duplicate else step.note
    receipt = _receipt(definition, evidence, key, identity, digest, now, step, entry, note, kept)
    next_state = _next_state(state, evidence, key, identity, step, moved)
    return Evaluation(step.outcome, step.reason, next_state, receipt, entry, step.close)


def _change(
    definition: WatcherDefinition,
    state: WatcherState,
    evidence: Evidence,
    now: datetime,
    step: _Step,
    key: str,
) -> ChangeStep | None:
    """A change watcher's transition when the condition was judged (else none: no truth claim),
    unless this trigger was applied before (a duplicate moves nothing)."""
    if definition.mode is not Mode.CHANGE or step.reason not in JUDGED or state.applied(key):
        return None
    holds = step.reason is Reason.CONDITION_TRUE
    at = _evidence_instant(evidence, now)
    return change_step(definition.change or PLAIN, state.holds, state.notified_at, holds, at)


def _noticed(step: _Step, notice: Notice) -> _Step:
    """A change watcher's judgment: ``resolved`` when the condition cleared; the notice noted."""
    if notice is Notice.QUIET and step.reason is Reason.CONDITION_FALSE:
        return step
    cleared = notice is Notice.RESOLVED or notice is Notice.CLEARED
    outcome = Outcome.RESOLVED if cleared else step.outcome
    note = f"change: {notice.value}"
    return step._replace(outcome=outcome, note=f"{step.note}; {note}" if step.note else note)


def _decide(
    definition: WatcherDefinition,
    state: WatcherState,
    evidence: Evidence,
    grants: Iterable[Grant],
    now: datetime,
    budget: BudgetGate,
    evaluators: Set[str],
    authorization: AuthzDecision | None,
    deadline: datetime | None,
) -> _Step:
    status = state.status
    if status not in (WatcherStatus.ACTIVE, WatcherStatus.PAUSED):
        return _Step(Outcome.NONE, Reason.NOT_ACTIVE)
    if _expired(deadline, state, evidence, now):
        return _Step(Outcome.NONE, Reason.EXPIRED, close=CloseReason.EXPIRED)
    if status is WatcherStatus.PAUSED:
        return _Step(Outcome.NONE, Reason.NOT_ACTIVE)

    source = definition.source
    decision = (
        authorization_for(definition, grants, now) if authorization is None else authorization
    )
    if not decision.allowed:
        once = definition.mode is Mode.ONCE
        return _Step(
            Outcome.NONE,
            Reason.AUTHORIZATION_DENIED,
            advance=False,
            close=CloseReason.ACCESS_REVOKED if once else None,
            authz=decision,
            note=_NOTE_DENIED[definition.mode],
        )

    unavailable = Outcome.UNAVAILABLE
    if not _source_matches(definition, evidence):
        return _Step(unavailable, Reason.SOURCE_MISMATCH, authz=decision)
    if schedules.is_missed_occurrence(definition, evidence):
        return _Step(Outcome.NONE, Reason.MISSED, authz=decision, note=schedules.MISSED_NOTE)
    fresh = freshness(evidence, schedules.fire_max_age(definition, evidence), now)
    if fresh is Freshness.STALE:
        note = schedules.STALE_NOTE if isinstance(source, ScheduleSource) else ""
        return _Step(unavailable, Reason.STALE, authz=decision, note=note)
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


def authorization_for(
    definition: WatcherDefinition, grants: Iterable[Grant], now: datetime
) -> AuthzDecision:
    """Whether ``grants`` let this definition's subject evaluate its source (and governed
    tool) for its purpose at ``now``."""
    source = definition.source
    return authorize(
        grants,
        tenant_id=definition.tenant_id,
        user_id=definition.user_id,
        purpose=definition.purpose,
        action=Action.EVALUATE,
        source_id=definition.source_id,
        tool=source.governed_tool if isinstance(source, PollingSource) else None,
        now=now,
    )


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
        closes = definition.mode is Mode.ONCE or schedules.is_one_shot(definition)
        close = CloseReason.SATISFIED if closes else None
    else:
        outcome, reason, close = Outcome.PENDING, Reason.CONDITION_FALSE, None
    return _Step(outcome, reason, close=close, authz=decision, budget=verdict, keep_payload=True)


def _evidence_instant(evidence: Evidence, now: datetime) -> datetime:
    """The instant evidence stands for: a tick's scheduled instant, else evaluation time."""
    return evidence.scheduled_at if evidence.scheduled_at is not None else now


def _expired(
    deadline: datetime | None, state: WatcherState, evidence: Evidence, now: datetime
) -> bool:
    """Past the ``deadline`` (the definition's, for this state's activation). An active watch
    still gets its final evaluation *at* the deadline (the ticker's tick scheduled exactly
    then); a paused one just expires there.
    """
    if deadline is None:
        return False
    at = _evidence_instant(evidence, now)
    if state.status is WatcherStatus.PAUSED:
        return at >= deadline
    return at > deadline


def _final_at_deadline(
    deadline: datetime | None, evidence: Evidence, now: datetime, step: _Step
) -> _Step:
    """After the final evaluation at the deadline, a watch that did not close expires."""
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
    identity: dict[str, str],
    digest: str,
    now: datetime,
    step: _Step,
    entry: OutboxEntry | None,
    note: str,
    kept: dict[str, Any] | None,
) -> Receipt:
    """Built with ``_make`` in ``Receipt``'s field order (no keywords to match: once per
    evaluation), as :func:`_next_state` builds the state. ``kept``: the payload's retained
    leaves, when the receipt keeps them."""
    authz = step.authz
    assert definition.version is not None
    return Receipt._make(
        (
            definition.tenant_id,
            definition.user_id,
            definition.watcher_id,
            definition.version,
            now,  # evaluated_at
            digest,  # evidence_digest
            identity,  # trigger
            key,  # trigger_key
            evidence.observed_at,
            step.outcome,
            step.reason,
            None if authz is None else authz.allowed,  # authorized
            evidence.position,
            "" if authz is None else str(authz),  # authorization
            step.budget,
            evidence.tool_error if step.reason is Reason.TOOL_ERROR else None,
            kept,  # payload
            None if entry is None else key,  # delivery_key
            note,
            False,  # erased
            None,  # retain_until: the writer's
        )
    )


def _next_state(
    state: WatcherState,
    evidence: Evidence,
    key: str,
    identity: dict[str, str],
    step: _Step,
    moved: ChangeStep | None,
) -> WatcherState:
    """Advance the checkpoint (or not, §11), count the evaluation, close if decided, keep a
    change watcher's truth.

    Built field by field with ``_make`` (no checks): every value here is the rules' own, and
    this runs once per evaluation."""
    close = step.close
    checkpoint: AppliedTrigger | None
    if step.advance:
        checkpoint = AppliedTrigger._make((key, identity, evidence.observed_at, evidence.position))
        recent = state.remember(key)
        outcome: Outcome | None = step.outcome
        reason: Reason | None = step.reason
    elif close is None:
        return state  # authorization denied (every): no transition at all
    else:
        checkpoint, recent = state.checkpoint, state.recent_triggers
        outcome, reason = state.last_outcome, state.last_reason
    if close is None:
        status, closed = state.status, state.closed_reason
    else:
        status, closed = transition(state.status, close_event(close)), close
    return WatcherState._make(
        (
            state.version,
            status,
            state.activated_at,
            checkpoint,
            recent,
            outcome,
            reason,
            state.evaluations + 1 if step.outcome is not Outcome.NONE else state.evaluations,
            closed,
            state.revision + 1,
            state.holds if moved is None else moved.holds,
            state.notified_at if moved is None else moved.notified_at,
        )
    )
