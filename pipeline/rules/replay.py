"""Replay: re-derive recorded decisions and report what differs (DESIGN.md §2, §6, §10).

Owns :func:`replay`: each selected receipt evaluated again by the pure
:func:`~pipeline.rules.evaluation.evaluate`, with what replay cannot recompute (authorization,
budget, the status the processor set, pinned registration) taken as recorded, and compared.
Leaves out what it reads and reports (``replay_model``), reading Kafka
(``pipeline.ops.replay_reader``) and printing (``pipeline.cli``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from pipeline.rules.authz import Action, AuthzDecision, Grant
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.change import recorded_truth
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError, TransitionError
from pipeline.rules.evaluation import Evaluation, evaluate, recorded_budget
from pipeline.rules.lifecycle import WatcherStatus, is_closed
from pipeline.rules.outcomes import Reason
from pipeline.rules.receipts import Receipt
from pipeline.rules.replay_model import (
    Decision,
    DefinitionVersion,
    Difference,
    DifferenceKind,
    History,
    Regrant,
    ReplayClock,
    ReplayInput,
    ReplayReport,
    SkipReason,
    WatcherKey,
)
from pipeline.rules.sources import PollingSource
from pipeline.rules.watcher_state import WatcherState

__all__ = ["replay"]

_RECORDED_GRANT: Final = "replay:recorded-verdict"
_FOREVER: Final = datetime(9999, 1, 1, tzinfo=UTC)


def replay(
    history: History,
    *,
    clock: ReplayClock = ReplayClock.RECORDED,
    override: WatcherDefinition | None = None,
    regrant: Regrant | None = None,
) -> ReplayReport:
    """Replay every receipt whose input position is in ``history.selected``.

    Receipts are threaded per watcher version in log order, so dedupe memory and closes carry
    from one evaluation to the next as they did in the evaluator. Conditions, freshness,
    expiry, dedupe, keys, late flags, messages and a change watcher's transitions are
    recomputed (receipts before the range seed them), at the receipt's evaluation time or the
    input's arrival (``clock``). ``override`` answers "what would this have fired?"; ``regrant``
    decides chosen receipts with another authorization instead of the recorded one. Inputs no
    watcher evaluated have no receipt and are not replayed; neither are inputs a recorded closed
    watch never saw. A decision whose receipt, definition or input is erased (its data key
    shredded, DESIGN.md §10) is reported as erased (:attr:`SkipReason.ERASED`), never as a
    difference.
    """
    replayer = _Replayer(history, clock, override, regrant)
    for receipt in history.receipts:
        replayer.take(receipt)
    return replayer.report


class _Replayer:
    """One replay's threaded state: each watcher version's state, and the report so far."""

    __slots__ = ("_clock", "_history", "_override", "_overrides", "_regrant", "_states", "report")

    def __init__(
        self,
        history: History,
        clock: ReplayClock,
        override: WatcherDefinition | None,
        regrant: Regrant | None,
    ) -> None:
        self._history = history
        self._clock = clock
        self._override = override
        self._regrant = regrant
        self._states: dict[tuple[WatcherKey, int], WatcherState] = {}
        self._overrides: dict[int, WatcherDefinition] = {}
        self.report = ReplayReport()

    def take(self, receipt: Receipt) -> None:
        """Thread one receipt: seed it (before the range), skip it, or replay it."""
        history = self._history
        watcher = (receipt.tenant_id, receipt.user_id, receipt.watcher_id)
        slot = (watcher, receipt.watcher_version)
        version = _version_of(history, receipt, self._override, self._overrides)
        state = self._states.get(slot) or _fresh(receipt, version)
        item = history.inputs.get(receipt.position or "")
        if receipt.position not in history.selected:
            self._states[slot] = _seeded(state, receipt)
        elif self._erased(receipt, item):
            self._skip(slot, state, receipt, SkipReason.ERASED)
        elif version is None or item is None:
            # Not replayable: carry its trigger forward as recorded, so dedupe still holds.
            missing = SkipReason.DEFINITION_MISSING if version is None else SkipReason.INPUT_MISSING
            self._skip(slot, state, receipt, missing)
        elif is_closed(state.status):
            self.report.replayed += 1
            self.report.differences.append(_difference(DifferenceKind.NOT_EVALUATED, receipt, None))
        else:
            self._replay(slot, state, receipt, version, item)

    def _erased(self, receipt: Receipt, item: ReplayInput | None) -> bool:
        """Its receipt, its definition (unless overridden) or its input is sealed under a
        shredded key."""
        history = self._history
        logged = (receipt.tenant_id, receipt.user_id, receipt.watcher_id, receipt.watcher_version)
        return (
            receipt.erased
            or (self._override is None and logged in history.erased)
            or (item is None and receipt.position in history.erased_inputs)
        )

    def _skip(
        self,
        slot: tuple[WatcherKey, int],
        state: WatcherState,
        receipt: Receipt,
        reason: SkipReason,
    ) -> None:
        self._states[slot] = _seeded(state, receipt)
        skipped = self.report.skipped
        skipped[reason] = skipped.get(reason, 0) + 1

    def _replay(
        self,
        slot: tuple[WatcherKey, int],
        state: WatcherState,
        receipt: Receipt,
        version: DefinitionVersion,
        item: ReplayInput,
    ) -> None:
        """Evaluate the receipt again, then count and compare the decision."""
        regrant = self._regrant
        granted = None if regrant is None else regrant(receipt, version.definition)
        try:
            next_state, evaluation = _evaluate(version, state, receipt, item, self._clock, granted)
        except (DefinitionError, TransitionError, ValueError):
            self._skip(slot, state, receipt, SkipReason.INVALID)
            return
        self._states[slot] = next_state
        report = self.report
        if granted is not None:
            report.regranted.append((receipt, evaluation))
        decision = _decision(evaluation)
        report.replayed += 1
        report.reasons[decision.reason] = report.reasons.get(decision.reason, 0) + 1
        if decision.delivery_key is not None:
            report.fired.add(decision.delivery_key)
        found = _compare(receipt, decision, version, self._history)
        if found is not None:
            report.differences.append(found)


def _decision(evaluation: Evaluation) -> Decision:
    outbox = evaluation.outbox
    return Decision(
        evaluation.outcome,
        evaluation.reason,
        None if outbox is None else outbox.delivery_key,
        evaluation.receipt.evidence_digest,
        outbox is not None and outbox.late,
        None if outbox is None else outbox.message,
    )


def _version_of(
    history: History,
    receipt: Receipt,
    override: WatcherDefinition | None,
    cache: dict[int, WatcherDefinition],
) -> DefinitionVersion | None:
    watcher = (receipt.tenant_id, receipt.user_id, receipt.watcher_id)
    logged = history.definitions.get((*watcher, receipt.watcher_version))
    if override is None or override.watcher_key != watcher:
        return logged
    changed = cache.get(receipt.watcher_version)
    if changed is None:
        changed = override.with_version(receipt.watcher_version)
        cache[receipt.watcher_version] = changed
    if logged is None:
        return DefinitionVersion(changed, receipt.evaluated_at)
    return DefinitionVersion(changed, logged.logged_at, logged.activated_at)


def _fresh(receipt: Receipt, version: DefinitionVersion | None) -> WatcherState:
    activated = None if version is None else version.activated_at or version.logged_at
    return WatcherState(
        version=receipt.watcher_version, status=WatcherStatus.ACTIVE, activated_at=activated
    )


def _seeded(state: WatcherState, receipt: Receipt) -> WatcherState:
    """A receipt not replayed: its trigger and judged truth remembered, as the evaluator did."""
    if receipt.reason is Reason.AUTHORIZATION_DENIED:
        return state
    seeded = recorded_truth(state, receipt)
    return seeded.replace(recent_triggers=state.remember(receipt.trigger_key))


def _recorded_grants(definition: WatcherDefinition, receipt: Receipt) -> tuple[Grant, ...]:
    """Authorization as recorded: a grant covering exactly this evaluation, or none.

    A receipt that never reached authorization (``None``) grants nothing: fail-closed.
    """
    if receipt.authorized is not True:
        return ()
    source = definition.source
    tools = frozenset({source.governed_tool}) if isinstance(source, PollingSource) else frozenset()
    return (
        Grant(
            grant_id=_RECORDED_GRANT,
            tenant_id=definition.tenant_id,
            user_id=definition.user_id,
            purpose=definition.purpose,
            sources=frozenset({definition.source_id}),
            tools=tools,
            actions=frozenset({Action.EVALUATE}),
            until=_FOREVER,
        ),
    )


def _evaluate(
    version: DefinitionVersion,
    state: WatcherState,
    receipt: Receipt,
    item: ReplayInput,
    clock: ReplayClock,
    granted: AuthzDecision | None,
) -> tuple[WatcherState, Evaluation]:
    definition = version.definition
    paused = receipt.reason is Reason.NOT_ACTIVE
    status = WatcherStatus.PAUSED if paused else WatcherStatus.ACTIVE
    if state.status is not status:
        state = state.replace(status=status)
    source = definition.source
    missing = receipt.reason is Reason.EVALUATOR_MISSING
    evaluators: frozenset[str] = frozenset()
    if isinstance(source, PollingSource) and not missing:
        evaluators = frozenset({source.tool})
    now = receipt.evaluated_at if clock is ReplayClock.RECORDED else item.arrival
    result = evaluate(
        definition,
        state,
        item.evidence,
        () if granted is not None else _recorded_grants(definition, receipt),
        now,
        recorded_budget(receipt.budget or BudgetVerdict.OK),
        evaluators=evaluators,
        authorization=granted,
    )
    return result.next_state, result


def _difference(kind: DifferenceKind, receipt: Receipt, replayed: Decision | None) -> Difference:
    return Difference(
        kind=kind,
        watcher=(receipt.tenant_id, receipt.user_id, receipt.watcher_id),
        version=receipt.watcher_version,
        position=receipt.position,
        trigger=receipt.trigger,
        recorded=Decision.of(receipt),
        replayed=replayed,
    )


def _compare(
    receipt: Receipt, decision: Decision, version: DefinitionVersion, history: History
) -> Difference | None:
    recorded = Decision.of(receipt)
    if (recorded.outcome, recorded.reason, recorded.delivery_key) != (
        decision.outcome,
        decision.reason,
        decision.delivery_key,
    ):
        return _difference(DifferenceKind.DECISION, receipt, decision)
    if recorded.evidence_digest != decision.evidence_digest:
        return _difference(DifferenceKind.EVIDENCE, receipt, decision)
    key = decision.delivery_key
    if key is None or history.outbox is None:
        return None
    if key not in history.outbox:
        retention = version.definition.privacy.delivery_retention
        if _still_retained(receipt.evaluated_at, retention, history.read_at):
            return _difference(DifferenceKind.OUTBOX_MISSING, receipt, decision)
        return None
    entry = history.outbox[key]
    if entry is not None and (
        entry.evidence_digest != decision.evidence_digest
        or entry.watcher_version != receipt.watcher_version
        or entry.late != decision.late
        or entry.message not in (None, decision.message)  # None: written before messages
    ):
        return _difference(DifferenceKind.OUTBOX_MISMATCH, receipt, decision)
    return None


def _still_retained(created: datetime, retention: timedelta, read_at: datetime | None) -> bool:
    """Whether the outbox must still hold an entry created at ``created`` (else it was purged
    and its tombstone may be compacted away)."""
    return read_at is not None and created + retention > read_at
