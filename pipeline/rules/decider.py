"""The native decider (DESIGN.md §10 "Compiled hot path"): ``vigil_native.Decider``, made once
with the rules' constants, classes and calls (None on the Python path). It decides ``evaluate``'s
plain case — an ``every`` or ``once`` watcher's event, active, within its deadline, authorized,
of its source and type, fresh, budgeted ``ok`` or ``exhausted`` — to the same ``Evaluation`` (its
entry too, but for a template's); kept payload and lifecycle move are the rules' calls.
"""

from __future__ import annotations

from typing import Any, Final

from pipeline.rules.bounds import MAX_MESSAGE
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.definition import Mode
from pipeline.rules.definition_parts import EntryFields
from pipeline.rules.evaluated import NOTE_DUPLICATE, Evaluation
from pipeline.rules.evidence import EvidenceKind
from pipeline.rules.freshness import FUTURE_SKEW
from pipeline.rules.lifecycle import CloseReason, WatcherStatus, close_event, transition
from pipeline.rules.message import ABSENT, MAX_VALUE
from pipeline.rules.native import NATIVE
from pipeline.rules.outbox import OutboxEntry, build_entry
from pipeline.rules.outcomes import Outcome, Reason
from pipeline.rules.privacy import keep_leaves
from pipeline.rules.receipts import Receipt
from pipeline.rules.sources import EventSource
from pipeline.rules.watcher_state import RECENT_TRIGGERS, AppliedTrigger, WatcherState

__all__ = ["DECIDER"]


def _decider() -> Any:
    if NATIVE is None:
        return None
    enums: tuple[Any, ...] = (EvidenceKind.EVENT, Mode.EVERY, Mode.ONCE, WatcherStatus.ACTIVE)
    enums += (Outcome.SATISFIED, Outcome.PENDING, Outcome.TERMINAL_UNSATISFIED, Outcome.UNAVAILABLE)
    enums += (Reason.CONDITION_TRUE, Reason.CONDITION_FALSE, Reason.TERMINAL_CONDITION)
    enums += (Reason.BUDGET_EXHAUSTED, CloseReason.SATISFIED, CloseReason.TERMINAL_UNSATISFIED)
    enums += (BudgetVerdict.OK, BudgetVerdict.EXHAUSTED)
    classes = (EventSource, Receipt, WatcherState, AppliedTrigger, Evaluation)
    calls = (build_entry, keep_leaves, transition, close_event)
    entries = (OutboxEntry, EntryFields, MAX_VALUE, MAX_MESSAGE, ABSENT)
    return NATIVE.Decider(
        enums, classes, NOTE_DUPLICATE, FUTURE_SKEW, RECENT_TRIGGERS, calls, entries
    )


DECIDER: Final[Any] = _decider()
"""``vigil_native.Decider``, or None on the Python path."""
