"""Recovery: what ``vigil replay --apply`` writes for evaluations an authorization failure skipped
(DESIGN.md §10 "Authorization failure and checkpoints"), pure.

Owns :func:`plan_recovery` (its docstring gives the rules): each skipped evaluation of an ``every``
watcher decided again with the current grants, at most once, as a new receipt and its outbox entry.
Left out: reading history and writing records (``pipeline.ops.replay_apply``) and the operator's
authorization and audit (``pipeline.rules.commands.recover``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from pipeline.rules.authz import AuthzDecision, Grant
from pipeline.rules.definition import Mode, WatcherDefinition
from pipeline.rules.evaluation import authorization_for
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import Reason
from pipeline.rules.receipts import Receipt
from pipeline.rules.replay import replay
from pipeline.rules.replay_model import History, ReplayReport

__all__ = ["NOTE", "Recovery", "RecoveryPlan", "plan_recovery"]

NOTE: Final = "recovered by replay --apply: skipped while authorization failed"

_Trigger = tuple[str, str, str, int, str]


@dataclass(frozen=True, slots=True)
class Recovery:
    """One skipped evaluation decided again: its new receipt and, if it fired, the entry."""

    skipped: Receipt
    receipt: Receipt
    outbox: OutboxEntry | None
    source_id: str  # the receipt's placement, as the evaluator places it
    evidence_retention: timedelta  # its ``retain_until`` is its evaluation time plus this


@dataclass(slots=True)
class RecoveryPlan:
    """What ``--apply`` writes, and why the other skipped evaluations are left."""

    recoveries: list[Recovery] = field(default_factory=list)
    recovered_before: int = 0  # an authorized receipt already decided that trigger
    still_denied: int = 0  # the current grants deny it too
    other_version: int = 0  # of a version other than the one recovered
    once: int = 0  # a once watch: the denial cancelled it
    change: int = 0  # a change watch: its later transitions already went on without it
    in_outbox: int = 0  # fired, but the outbox already holds its key: not written again
    report: ReplayReport | None = None

    @property
    def entries(self) -> list[OutboxEntry]:
        return [r.outbox for r in self.recoveries if r.outbox is not None]


def _trigger(receipt: Receipt) -> _Trigger:
    return (
        receipt.tenant_id,
        receipt.user_id,
        receipt.watcher_id,
        receipt.watcher_version,
        receipt.trigger_key,
    )


def plan_recovery(
    history: History, grants: Sequence[Grant], now: datetime, *, version: int | None = None
) -> RecoveryPlan:
    """The recoveries of the skipped evaluations in ``history`` (of watcher ``version`` only,
    when given), with ``grants`` as they are at ``now``.

    Receipts are threaded in log order as the evaluator did; each ``authorization_denied``
    receipt of an ``every`` watcher is decided again with the current grants at its recorded
    evaluation time, so freshness, the condition, dedupe and the delivery key are what they
    would have been had the grant held. A trigger an authorized receipt of the same version
    already decided is not decided twice, and an entry whose delivery key the outbox holds is not
    written again. Each recovery is a new receipt (noted as recovered) and, when the condition
    held, its outbox entry; it is not charged to the evaluation budget (delivery charges its
    own). ``once`` and ``change`` watches are never recovered.
    """
    decided = {_trigger(r) for r in history.receipts if r.authorized is True}
    plan = RecoveryPlan()

    def regrant(receipt: Receipt, definition: WatcherDefinition) -> AuthzDecision | None:
        if receipt.reason is not Reason.AUTHORIZATION_DENIED:
            return None
        if definition.mode is Mode.ONCE:
            plan.once += 1
        elif definition.mode is Mode.CHANGE:
            plan.change += 1
        elif version is not None and receipt.watcher_version != version:
            plan.other_version += 1
        elif _trigger(receipt) in decided:
            plan.recovered_before += 1
        else:
            return authorization_for(definition, grants, now)
        return None

    plan.report = replay(history, regrant=regrant)
    known = history.outbox or {}
    for skipped, evaluation in plan.report.regranted:
        if evaluation.reason is Reason.AUTHORIZATION_DENIED:
            plan.still_denied += 1
            continue
        outbox = evaluation.outbox
        if outbox is not None and outbox.delivery_key in known:
            plan.in_outbox += 1
            outbox = None
        receipt = evaluation.receipt._replace(note=NOTE)
        definition = history.definitions[
            (skipped.tenant_id, skipped.user_id, skipped.watcher_id, skipped.watcher_version)
        ].definition
        retention = definition.privacy.evidence_retention
        recovery = Recovery(skipped, receipt, outbox, definition.source_id, retention)
        plan.recoveries.append(recovery)
    return plan
