"""What replay reads and what it reports (DESIGN.md §2, §6, §10).

Owns :class:`History` (definition versions, input evidence by position, receipts in log order,
the outbox's latest records), the :class:`ReplayReport` with its :class:`Difference` s and skip
counts, and the clock a replay runs at. Leaves out replaying (``pipeline.rules.replay``) and
reading Kafka (``pipeline.ops.replay_reader``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from pipeline.rules.authz import AuthzDecision
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.evaluation import Evaluation
from pipeline.rules.evidence import Evidence
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import Outcome, Reason
from pipeline.rules.receipts import Receipt

__all__ = [
    "Decision",
    "DefinitionVersion",
    "Difference",
    "DifferenceKind",
    "History",
    "Regrant",
    "ReplayClock",
    "ReplayInput",
    "ReplayReport",
    "SkipReason",
    "WatcherKey",
    "affected_keys",
]

WatcherKey = tuple[str, str, str]
Regrant = Callable[[Receipt, WatcherDefinition], AuthzDecision | None]
"""The authorization to decide a receipt with instead of the recorded one, or None."""


class ReplayClock(StrEnum):
    """Which instant a replayed evaluation runs at."""

    RECORDED = "recorded"  # the receipt's evaluation time: must reproduce every decision
    ARRIVAL = "arrival"  # the input record's broker timestamp: what an outage made stale


class DifferenceKind(StrEnum):
    DECISION = "decision"  # outcome, reason or outbox key differ
    EVIDENCE = "evidence"  # same decision, but the input's digest is not what was evaluated
    NOT_EVALUATED = "not_evaluated"  # replay closed the watch before this input
    OUTBOX_MISSING = "outbox_missing"  # a still-retained decision has no outbox record
    OUTBOX_MISMATCH = "outbox_mismatch"  # the outbox record is not the replayed entry (message too)


class SkipReason(StrEnum):
    """Why a receipt in range could not be replayed (not a difference: data is gone)."""

    DEFINITION_MISSING = "definition_missing"  # its version is not in definition-log
    INPUT_MISSING = "input_missing"  # its input record is past retention or out of range
    INVALID = "invalid"  # the definition or state did not validate
    ERASED = "erased"  # its receipt, definition or input is sealed under a shredded key


@dataclass(frozen=True, slots=True)
class DefinitionVersion:
    """One accepted version as definition-log holds it; ``activated_at`` bounds a window."""

    definition: WatcherDefinition
    logged_at: datetime
    activated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ReplayInput:
    """One input record: its evidence and when the broker received it."""

    evidence: Evidence
    arrival: datetime


@dataclass(frozen=True, slots=True)
class History:
    """What replay reads. ``receipts`` in log order, all of them up to the range's end: those
    before it seed dedupe memory. ``selected`` are the input positions in range; ``outbox``
    maps a delivery key to its latest record (``None``: purged). ``read_at`` is when the
    outbox was read, to tell a purged entry from a missing one."""

    definitions: Mapping[tuple[str, str, str, int], DefinitionVersion]
    inputs: Mapping[str, ReplayInput]
    receipts: Sequence[Receipt]
    selected: frozenset[str]
    outbox: Mapping[str, OutboxEntry | None] | None = None
    read_at: datetime | None = None
    erased: frozenset[tuple[str, str, str, int]] = frozenset()  # versions, definition erased
    erased_inputs: frozenset[str] = frozenset()  # positions of ticks whose payload is erased


@dataclass(frozen=True, slots=True)
class Decision:
    outcome: Outcome
    reason: Reason
    delivery_key: str | None
    evidence_digest: str
    late: bool = False  # the outbox entry's late flag (a schedule fire decided past its grace)
    message: str | None = None  # the replayed entry's rendered message (a receipt has none)

    @classmethod
    def of(cls, receipt: Receipt) -> Decision:
        return cls(receipt.outcome, receipt.reason, receipt.delivery_key, receipt.evidence_digest)


@dataclass(frozen=True, slots=True)
class Difference:
    kind: DifferenceKind
    watcher: WatcherKey
    version: int
    position: str | None
    trigger: Mapping[str, str]
    recorded: Decision
    replayed: Decision | None


@dataclass(slots=True)
class ReplayReport:
    replayed: int = 0
    differences: list[Difference] = field(default_factory=list)
    skipped: dict[SkipReason, int] = field(default_factory=dict)
    reasons: dict[Reason, int] = field(default_factory=dict)  # replayed reason counts
    fired: set[str] = field(default_factory=set)  # replayed outbox keys
    regranted: list[tuple[Receipt, Evaluation]] = field(default_factory=list)

    @property
    def would_fire(self) -> list[str]:
        """Outbox keys replay creates that the record does not have."""
        return sorted(
            d.replayed.delivery_key
            for d in self.differences
            if d.replayed is not None
            and d.replayed.delivery_key is not None
            and d.replayed.delivery_key != d.recorded.delivery_key
        )

    @property
    def would_not_fire(self) -> list[str]:
        """Recorded outbox keys replay does not create."""
        return sorted(
            d.recorded.delivery_key
            for d in self.differences
            if d.recorded.delivery_key is not None
            and (d.replayed is None or d.replayed.delivery_key != d.recorded.delivery_key)
        )


def affected_keys(differences: Iterable[Difference]) -> list[str]:
    """Every delivery key that appears on either side of a difference."""
    keys = {
        key
        for d in differences
        for key in (
            d.recorded.delivery_key,
            None if d.replayed is None else d.replayed.delivery_key,
        )
        if key is not None
    }
    return sorted(keys)
