"""The delivery state machine and the pre-dispatch decision (DESIGN.md §4, §8, §11; seed 000).

Owns :class:`DeliveryState`, the transition table (``pending → dispatching → delivered | pending
| dead_letter``, deferral, ``suppressed``, ``cancelled``, restart, :func:`redeliver`; an illegal
move raises :class:`TransitionError`), the retry ceiling, due times and :func:`plan_attempt`.
Leaves out persistence and fencing (the delivery consumer), destinations (adapters) and the
verdicts' sources."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pipeline.rules.backoff import RetryPolicy, backoff_wait
from pipeline.rules.budgets import BudgetVerdict, Dimension, attempt_token
from pipeline.rules.errors import TransitionError
from pipeline.rules.instants import utc
from pipeline.rules.outcomes import DeliveryStatus, ErrorCode, SuppressReason
from pipeline.rules.quiet_hours import QuietHours, next_allowed

__all__ = [
    "BUDGET_UNAVAILABLE_RETRY",
    "TERMINAL_ERRORS",
    "DeferReason",
    "DeliveryState",
    "DispatchAction",
    "DispatchEvent",
    "DispatchPlan",
    "attempt_cost",
    "attempt_token_for",
    "cancel",
    "claim",
    "defer",
    "fail",
    "give_up",
    "is_redeliverable",
    "is_settled",
    "pending",
    "plan_attempt",
    "purge_due",
    "redeliver",
    "restore",
    "succeed",
    "suppress",
]

# Redis down: look again soon, never dispatch unbudgeted (DESIGN.md §3).
BUDGET_UNAVAILABLE_RETRY = timedelta(seconds=30)

# A destination that said "gone" or "never" will not change its mind on a retry.
TERMINAL_ERRORS = frozenset({ErrorCode.HTTP_410, ErrorCode.HTTP_4XX, ErrorCode.REJECTED})


class DeferReason(StrEnum):
    """Why a ``pending`` entry waits past its original due time."""

    BACKOFF = "backoff"  # a retryable failure; the next attempt waits the §8 backoff
    QUIET_HOURS = "quiet_hours"
    ATTEMPT_CEILING = "attempt_ceiling"  # this window's attempts are spent: next window
    BUDGET_UNAVAILABLE = "budget_unavailable"  # Redis unreachable


class DispatchEvent(StrEnum):
    CLAIM = "claim"
    RESTORE = "restore"
    SUCCEED = "succeed"
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"
    DEFER = "defer"
    SUPPRESS = "suppress"
    CANCEL = "cancel"
    REDELIVER = "redeliver"


_TABLE: dict[tuple[DeliveryStatus, DispatchEvent], DeliveryStatus] = {
    (DeliveryStatus.PENDING, DispatchEvent.CLAIM): DeliveryStatus.DISPATCHING,
    (DeliveryStatus.PENDING, DispatchEvent.DEFER): DeliveryStatus.PENDING,
    (DeliveryStatus.PENDING, DispatchEvent.SUPPRESS): DeliveryStatus.SUPPRESSED,
    (DeliveryStatus.PENDING, DispatchEvent.CANCEL): DeliveryStatus.CANCELLED,
    (
        DeliveryStatus.PENDING,
        DispatchEvent.DEAD_LETTER,
    ): DeliveryStatus.DEAD_LETTER,  # give_up: it cannot even be planned
    (DeliveryStatus.DISPATCHING, DispatchEvent.SUCCEED): DeliveryStatus.DELIVERED,
    (DeliveryStatus.DISPATCHING, DispatchEvent.RETRY): DeliveryStatus.PENDING,
    (DeliveryStatus.DISPATCHING, DispatchEvent.DEAD_LETTER): DeliveryStatus.DEAD_LETTER,
    (DeliveryStatus.DISPATCHING, DispatchEvent.RESTORE): DeliveryStatus.PENDING,
    (DeliveryStatus.DEAD_LETTER, DispatchEvent.REDELIVER): DeliveryStatus.PENDING,
    (DeliveryStatus.SUPPRESSED, DispatchEvent.REDELIVER): DeliveryStatus.PENDING,
}

# The target of each event, so an illegal move can name where it tried to go.
_TARGETS: dict[DispatchEvent, DeliveryStatus] = {event: to for (_, event), to in _TABLE.items()}

_SETTLED = frozenset(
    {
        DeliveryStatus.DELIVERED,
        DeliveryStatus.DEAD_LETTER,
        DeliveryStatus.SUPPRESSED,
        DeliveryStatus.CANCELLED,
    }
)


@dataclass(frozen=True, slots=True)
class DeliveryState:
    """One outbox entry's delivery record: what ``delivery-state`` holds and audits (§11)."""

    delivery_key: str
    status: DeliveryStatus
    attempt: int  # attempts made (claims), the one in flight included
    due_at: datetime
    created_at: datetime
    updated_at: datetime
    reason: DeferReason | SuppressReason | None = None
    last_error: ErrorCode | None = None
    delivered_at: datetime | None = None
    settled_at: datetime | None = None
    redeliveries: int = 0  # redeliver commands applied: each starts a fresh attempt count


def _move(state: DeliveryState, event: DispatchEvent, **changes: Any) -> DeliveryState:
    """Apply ``event`` through the table, or raise naming the state and the refused target."""
    to = _TABLE.get((state.status, event))
    if to is None:
        raise TransitionError(
            f"delivery {state.delivery_key}: cannot {event.value} "
            f"from {state.status.value} to {_TARGETS[event].value}"
        )
    return replace(state, status=to, **changes)


def pending(delivery_key: str, due_at: datetime, now: datetime) -> DeliveryState:
    """The first state of an outbox entry: once persisted, the outbox offset may advance."""
    now = utc(now)
    return DeliveryState(delivery_key, DeliveryStatus.PENDING, 0, utc(due_at), now, now)


def claim(state: DeliveryState, now: datetime) -> DeliveryState:
    """``pending → dispatching``, attempt + 1. Only a due entry may be claimed."""
    now = utc(now)
    if state.status is DeliveryStatus.PENDING and now < state.due_at:
        raise TransitionError(
            f"delivery {state.delivery_key}: cannot claim from pending to dispatching "
            f"before it is due at {state.due_at.isoformat()}"
        )
    return _move(state, DispatchEvent.CLAIM, attempt=state.attempt + 1, reason=None, updated_at=now)


def restore(state: DeliveryState) -> DeliveryState:
    """After a restart: an interrupted ``dispatching`` entry is ``pending`` again, same key and
    attempt count, still due. Any other state is returned unchanged."""
    if state.status is not DeliveryStatus.DISPATCHING:
        return state
    return _move(state, DispatchEvent.RESTORE)


def succeed(state: DeliveryState, now: datetime) -> DeliveryState:
    now = utc(now)
    return _move(state, DispatchEvent.SUCCEED, updated_at=now, delivered_at=now, settled_at=now)


def fail(
    state: DeliveryState,
    error: ErrorCode,
    now: datetime,
    *,
    policy: RetryPolicy,
    retry_after: timedelta | None = None,
) -> DeliveryState:
    """Record a failed attempt: dead-letter if terminal or at the retry ceiling, else wait the
    §8 backoff (or ``Retry-After``, if longer) and try again."""
    now = utc(now)
    error = ErrorCode(error)
    # Only a dispatching entry has a failed attempt; let the table say so.
    if state.status is not DeliveryStatus.DISPATCHING:
        return _move(state, DispatchEvent.RETRY)
    if error in TERMINAL_ERRORS or state.attempt >= policy.max_attempts:
        return _move(
            state, DispatchEvent.DEAD_LETTER, last_error=error, updated_at=now, settled_at=now
        )
    wait = backoff_wait(state.delivery_key, state.attempt, policy.base, policy.cap, retry_after)
    return _move(
        state,
        DispatchEvent.RETRY,
        due_at=now + wait,
        reason=DeferReason.BACKOFF,
        last_error=error,
        updated_at=now,
    )


def give_up(state: DeliveryState, error: ErrorCode, now: datetime) -> DeliveryState:
    """Dead-letter a ``pending`` entry that cannot be planned at all (its own data breaks a
    rule): settled with ``error``, no attempt made, never retried (DESIGN.md §10)."""
    if state.status is not DeliveryStatus.PENDING:  # a dispatching entry fails through ``fail``
        raise TransitionError(
            f"delivery {state.delivery_key}: cannot give up "
            f"from {state.status.value} to {DeliveryStatus.DEAD_LETTER.value}"
        )
    now = utc(now)
    error = ErrorCode(error)
    return _move(state, DispatchEvent.DEAD_LETTER, last_error=error, updated_at=now, settled_at=now)


def defer(
    state: DeliveryState, until: datetime, reason: DeferReason, now: datetime
) -> DeliveryState:
    """Stay ``pending`` but wait until ``until``, recording why."""
    return _move(
        state,
        DispatchEvent.DEFER,
        due_at=utc(until),
        reason=DeferReason(reason),
        updated_at=utc(now),
    )


def suppress(state: DeliveryState, reason: SuppressReason, now: datetime) -> DeliveryState:
    """Settle without sending, with an auditable reason (§11)."""
    now = utc(now)
    reason = SuppressReason(reason)
    return _move(state, DispatchEvent.SUPPRESS, reason=reason, updated_at=now, settled_at=now)


def cancel(state: DeliveryState, now: datetime) -> DeliveryState:
    """Drop undelivered work of a cancelled watcher or an erased subject."""
    now = utc(now)
    return _move(state, DispatchEvent.CANCEL, updated_at=now, settled_at=now)


def redeliver(state: DeliveryState, now: datetime) -> DeliveryState:
    """A dead-lettered or suppressed entry due again now: attempt count back to zero, one more
    redelivery counted, the old error and reason cleared (any other state raises
    :class:`TransitionError`)."""
    now = utc(now)
    return _move(
        state,
        DispatchEvent.REDELIVER,
        attempt=0,
        redeliveries=state.redeliveries + 1,
        due_at=now,
        updated_at=now,
        reason=None,
        last_error=None,
        delivered_at=None,
        settled_at=None,
    )


def is_redeliverable(state: DeliveryState) -> bool:
    """Whether a ``redeliver`` command applies to ``state`` (dead-lettered or suppressed)."""
    return (state.status, DispatchEvent.REDELIVER) in _TABLE


def is_settled(state: DeliveryState) -> bool:
    return state.status in _SETTLED


def purge_due(state: DeliveryState, delivery_retention: timedelta) -> datetime:
    """When a settled entry's tombstones may be written: at once for dropped work (cancel and
    erase reach delivery, DESIGN §10), else once its delivery retention has passed (which
    covers the source's max age + 30 s, so a fresh replay still meets its dedupe key).
    Unsettled work is never purged."""
    if not is_settled(state):
        raise TransitionError(
            f"delivery {state.delivery_key}: {state.status.value} is not settled "
            "and is never purged"
        )
    settled = state.settled_at or state.updated_at
    if state.status is DeliveryStatus.CANCELLED:
        return settled
    return settled + delivery_retention


def attempt_cost(state: DeliveryState) -> dict[Dimension, int]:
    """What the next attempt charges: the first also counts one unique delivery."""
    cost = {Dimension.ATTEMPTS: 1}
    if state.attempt == 0:
        cost[Dimension.DELIVERIES] = 1
    return cost


def attempt_token_for(state: DeliveryState) -> str:
    """The idempotency token of the next attempt's charge (delivery key, redeliveries, attempt,
    §10): a redelivery's first attempt is charged again, a replayed claim is not."""
    return attempt_token(state.delivery_key, state.attempt + 1, state.redeliveries)


class DispatchAction(StrEnum):
    """What :func:`plan_attempt` decided; ``DispatchPlan.state`` is the state to persist."""

    DISPATCH = "dispatch"  # state is the claim: persist it, then call the destination
    DEFER = "defer"
    SUPPRESS = "suppress"
    CANCEL = "cancel"
    CHARGE_BUDGET = "charge_budget"  # charge attempt_cost() first, then plan again


@dataclass(frozen=True, slots=True)
class DispatchPlan:
    action: DispatchAction
    state: DeliveryState
    reason: DeferReason | SuppressReason | None = None


def plan_attempt(
    state: DeliveryState,
    *,
    now: datetime,
    authorized: bool,
    quiet_hours: QuietHours | None,
    attempt_budget: BudgetVerdict | None,
    closed: bool,
    window_end: datetime,
    delivery_budget: BudgetVerdict = BudgetVerdict.OK,
    unavailable_retry: timedelta = BUDGET_UNAVAILABLE_RETRY,
) -> DispatchPlan:
    """The checks before one attempt of a due ``pending`` entry, in order; the first decides.

    1. closed watcher or erased subject → cancel;
    2. authorization lost → suppressed (``authorization_denied``);
    3. inside quiet hours → defer to the next allowed instant;
    4. budget not yet charged (``attempt_budget is None``) → charge it, then plan again —
       checked only now so a deferred or dropped attempt costs nothing;
    5. unique deliveries exhausted, first attempt only → suppressed (``budget_exhausted``);
    6. attempt ceiling exhausted → defer to ``window_end``, where a new window starts;
    7. budget store unavailable → defer ``unavailable_retry``;
    8. else dispatch: the plan's state is the claim.
    """
    now = utc(now)
    if state.status is not DeliveryStatus.PENDING or now < state.due_at:
        claim(state, now)  # raises the precise TransitionError
    if closed:
        return DispatchPlan(DispatchAction.CANCEL, cancel(state, now))
    if not authorized:
        why = SuppressReason.AUTHORIZATION_DENIED
        return DispatchPlan(DispatchAction.SUPPRESS, suppress(state, why, now), why)
    if quiet_hours is not None:
        allowed = utc(next_allowed(quiet_hours, now))
        if allowed > now:
            return _deferred(state, allowed, DeferReason.QUIET_HOURS, now)
    if attempt_budget is None:
        return DispatchPlan(DispatchAction.CHARGE_BUDGET, state)
    if state.attempt == 0 and delivery_budget is BudgetVerdict.EXHAUSTED:
        why = SuppressReason.BUDGET_EXHAUSTED
        return DispatchPlan(DispatchAction.SUPPRESS, suppress(state, why, now), why)
    if attempt_budget is BudgetVerdict.EXHAUSTED:
        return _deferred(state, window_end, DeferReason.ATTEMPT_CEILING, now)
    if BudgetVerdict.UNAVAILABLE in (attempt_budget, delivery_budget):
        return _deferred(state, now + unavailable_retry, DeferReason.BUDGET_UNAVAILABLE, now)
    return DispatchPlan(DispatchAction.DISPATCH, claim(state, now))


def _deferred(
    state: DeliveryState, until: datetime, reason: DeferReason, now: datetime
) -> DispatchPlan:
    return DispatchPlan(DispatchAction.DEFER, defer(state, until, reason, now), reason)
