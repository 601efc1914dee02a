"""A watcher's runtime state, as the evaluator keeps it in ``watcher-state`` (DESIGN.md §2).

Owns :class:`WatcherState` and its :class:`Checkpoint` (the last evidence applied: trigger
identity, observation time and input position) plus the bounded memory of applied triggers
used to refuse a second outbox entry for the same evidence. How it changes is decided by
``evaluation``; how it is stored (Avro, compaction) by the serde and the stream runtime.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from pipeline.rules.lifecycle import CloseReason, WatcherStatus
from pipeline.rules.outcomes import Outcome, Reason

__all__ = ["RECENT_TRIGGERS", "Checkpoint", "WatcherState"]

RECENT_TRIGGERS: Final = 64


class Checkpoint(BaseModel):
    """The last evidence applied to this watcher; replay after a denial starts here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trigger_key: str  # the delivery key of the evidence's trigger identity
    trigger: dict[str, str]
    observed_at: datetime
    position: str | None = None


class WatcherState(BaseModel):
    """Status, checkpoint and counters of one watcher version. ``revision`` advances per change."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = Field(ge=0)
    status: WatcherStatus
    activated_at: datetime | None = None
    checkpoint: Checkpoint | None = None
    recent_triggers: tuple[str, ...] = ()
    last_outcome: Outcome | None = None
    last_reason: Reason | None = None
    evaluations: int = Field(default=0, ge=0)
    closed_reason: CloseReason | None = None
    revision: int = Field(default=0, ge=0)

    def applied(self, trigger_key: str) -> bool:
        """Whether evidence with this trigger identity already reached this version."""
        return trigger_key in self.recent_triggers

    def remember(self, trigger_key: str) -> tuple[str, ...]:
        """``recent_triggers`` with ``trigger_key`` added, bounded to the newest ones."""
        kept = self.recent_triggers
        if trigger_key in kept:  # rare: evidence seen again
            kept = tuple(k for k in kept if k != trigger_key)
        return (*kept, trigger_key)[-RECENT_TRIGGERS:]
