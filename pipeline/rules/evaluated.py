"""What one evaluation decided: :class:`Evaluation` (``evaluation.evaluate``'s answer, and the
native decider's, ``decider``) and the note a duplicate trigger's receipt carries. Deciding it is
``evaluation``'s."""

from __future__ import annotations

from typing import Final, NamedTuple

from pipeline.rules.lifecycle import CloseReason
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import Outcome, Reason
from pipeline.rules.receipts import Receipt
from pipeline.rules.watcher_state import WatcherState

__all__ = ["NOTE_DUPLICATE", "Evaluation"]

NOTE_DUPLICATE: Final = "trigger already applied to this version: no second outbox entry"


class Evaluation(NamedTuple):
    """What one evaluation decided: outcome, reason, next state, the receipt, at most one outbox
    entry, and whether the watch closes (a tuple, as ``_Step``: one is built per evaluation)."""

    outcome: Outcome
    reason: Reason
    next_state: WatcherState
    receipt: Receipt
    outbox: OutboxEntry | None = None
    close: CloseReason | None = None

    def __repr__(self) -> str:
        return f"Evaluation({self.outcome.value}, {self.reason.value}, close={self.close})"
