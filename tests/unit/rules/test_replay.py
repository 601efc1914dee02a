"""replay(): recorded decisions reproduce, changed definitions and clocks show what differs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipeline.kafka.scan import Bound
from pipeline.ops.replay_reader import Scope
from pipeline.rules.authz import Action, Grant
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import ConfigError, DefinitionError
from pipeline.rules.evaluation import evaluate, recorded_budget
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import Reason
from pipeline.rules.receipts import Receipt
from pipeline.rules.replay import replay
from pipeline.rules.replay_model import (
    DefinitionVersion,
    DifferenceKind,
    History,
    ReplayClock,
    ReplayInput,
    SkipReason,
    affected_keys,
)
from pipeline.rules.watcher_state import WatcherState

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TENANT, USER, WATCHER = "acme", "u-42", "release-build-failed"


def definition(condition: dict[str, Any] | None = None, **extra: Any) -> WatcherDefinition:
    body: dict[str, Any] = {
        "watcher_id": WATCHER,
        "purpose": "ops.alert",
        "source": {
            "kind": "event",
            "source_id": "ci.pipeline",
            "event_type": "build.finished",
            "max_age": "10m",
        },
        "condition": condition or {"eq": ["status", "failed"]},
        "delivery": {"target": "ops-hook", "verb": "notify"},
        "expires_at": "2030-01-01T00:00:00Z",
        **extra,
    }
    return WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER).with_version(1)


GRANT = Grant(
    grant_id="g-1",
    tenant_id=TENANT,
    user_id=USER,
    purpose="ops.alert",
    sources=frozenset({"ci.pipeline"}),
    actions=frozenset({Action.EVALUATE}),
    until=datetime(2030, 1, 1, tzinfo=UTC),
)


def event(n: int, status: str, branch: str = "main", event_id: str | None = None) -> Evidence:
    return Evidence(
        source_kind=EvidenceKind.EVENT,
        source_id="ci.pipeline",
        observed_at=T0 + timedelta(seconds=n),
        event_type="build.finished",
        event_id=event_id or f"b-{n}",
        payload={"status": status, "branch": branch},
        position=f"vigil.events:0:{n}",
    )


class Recorder:
    """Runs the evaluator's rule in order, as the consumer does, and keeps what it wrote."""

    def __init__(
        self, version: WatcherDefinition, evaluators: frozenset[str] = frozenset()
    ) -> None:
        self.definition = version
        self.evaluators = evaluators  # the pinned tools registered (a polling watcher's)
        self.state = WatcherState(version=1, status=WatcherStatus.ACTIVE, activated_at=T0)
        self.receipts: list[Receipt] = []
        self.inputs: dict[str, ReplayInput] = {}
        self.outbox: dict[str, OutboxEntry | None] = {}

    def run(
        self,
        evidence: Evidence,
        *,
        delay: timedelta = timedelta(seconds=1),
        arrival: timedelta = timedelta(0),
        grants: tuple[Grant, ...] = (GRANT,),
        budget: BudgetVerdict = BudgetVerdict.OK,
        paused: bool = False,
    ) -> None:
        status = WatcherStatus.PAUSED if paused else WatcherStatus.ACTIVE
        if self.state.status is not status and self.state.status in (
            WatcherStatus.ACTIVE,
            WatcherStatus.PAUSED,
        ):
            self.state = self.state.replace(status=status)
        now = evidence.observed_at + delay
        result = evaluate(
            self.definition,
            self.state,
            evidence,
            grants,
            now,
            recorded_budget(budget),
            evaluators=self.evaluators,
        )
        self.state = result.next_state
        self.receipts.append(result.receipt)
        assert evidence.position is not None
        self.inputs[evidence.position] = ReplayInput(evidence, evidence.observed_at + arrival)
        if result.outbox is not None:
            self.outbox[result.outbox.delivery_key] = result.outbox

    def history(self, selected: set[str] | None = None) -> History:
        return History(
            definitions={(TENANT, USER, WATCHER, 1): DefinitionVersion(self.definition, T0, T0)},
            inputs=self.inputs,
            receipts=self.receipts,
            selected=frozenset(self.inputs if selected is None else selected),
            outbox=self.outbox,
            read_at=T0 + timedelta(hours=1),
        )


@pytest.fixture
def recorded() -> Recorder:
    rec = Recorder(definition())
    for n in range(40):
        rec.run(event(n, "failed" if n % 3 == 0 else "passed", "release/1" if n % 2 else "main"))
    rec.run(event(40, "failed"), grants=())  # authorization denied, as recorded
    rec.run(event(41, "failed"), budget=BudgetVerdict.EXHAUSTED)
    rec.run(event(42, "failed"), paused=True)
    rec.run(event(43, "failed"), delay=timedelta(minutes=20))  # stale when evaluated
    rec.run(event(44, "failed", event_id="b-0"))  # a duplicate trigger: no second entry
    return rec


def test_replay_of_unchanged_definition_and_data_reports_no_differences(
    recorded: Recorder,
) -> None:
    report = replay(recorded.history())
    assert report.replayed == 45
    assert report.differences == []
    assert report.fired == set(recorded.outbox)
    assert report.reasons[Reason.AUTHORIZATION_DENIED] == 1
    assert report.reasons[Reason.BUDGET_EXHAUSTED] == 1
    assert report.reasons[Reason.NOT_ACTIVE] == 1
    assert report.reasons[Reason.STALE] == 1


def test_replay_with_changed_condition_reports_exactly_the_keys_that_change(
    recorded: Recorder,
) -> None:
    changed = definition({"all": [{"eq": ["status", "failed"]}, {"eq": ["branch", "main"]}]})
    report = replay(recorded.history(), override=changed)
    lost = {
        r.delivery_key
        for r in recorded.receipts
        if r.delivery_key is not None
        and recorded.inputs[r.position or ""].evidence.payload["branch"] != "main"
    }
    assert lost, "the fixture must have release-branch failures"
    assert set(report.would_not_fire) == lost
    assert report.would_fire == []
    assert set(affected_keys(report.differences)) == lost
    assert all(d.kind is DifferenceKind.DECISION for d in report.differences)


def test_replay_with_wider_condition_reports_the_keys_it_would_fire(recorded: Recorder) -> None:
    wider = definition({"any": [{"eq": ["status", "failed"]}, {"eq": ["status", "passed"]}]})
    report = replay(recorded.history(), override=wider)
    passed = {
        pos for pos, item in recorded.inputs.items() if item.evidence.payload["status"] == "passed"
    }
    assert len(report.would_fire) == len(passed)
    assert report.would_not_fire == []


def test_replay_at_arrival_shows_what_late_arrival_made_stale() -> None:
    rec = Recorder(definition())
    rec.run(event(0, "failed"), arrival=timedelta(minutes=30))  # the outage delayed it
    rec.run(event(1, "failed"))
    report = replay(rec.history(), clock=ReplayClock.ARRIVAL)
    assert [d.replayed.reason for d in report.differences if d.replayed] == [Reason.STALE]
    assert report.would_not_fire == [rec.receipts[0].delivery_key]


def test_replay_of_a_range_seeds_dedupe_from_earlier_receipts(recorded: Recorder) -> None:
    last = recorded.receipts[-1]
    assert last.delivery_key is None and last.reason is Reason.CONDITION_TRUE
    report = replay(recorded.history({last.position or ""}))
    assert report.replayed == 1
    assert report.differences == []


def test_replay_skips_receipts_whose_input_or_definition_is_gone(recorded: Recorder) -> None:
    history = recorded.history()
    gone = History(
        definitions={},
        inputs=history.inputs,
        receipts=history.receipts,
        selected=history.selected,
    )
    assert replay(gone).skipped == {SkipReason.DEFINITION_MISSING: 45}
    no_inputs = History(history.definitions, {}, history.receipts, history.selected)
    assert replay(no_inputs).skipped == {SkipReason.INPUT_MISSING: 45}


def test_replay_reports_a_changed_input_and_a_missing_outbox_entry(recorded: Recorder) -> None:
    history = recorded.history()
    first = recorded.receipts[0]
    assert first.delivery_key is not None
    tampered = dict(history.inputs)
    original = tampered[first.position or ""]
    altered = Evidence(
        source_kind=EvidenceKind.EVENT,
        source_id="ci.pipeline",
        observed_at=original.evidence.observed_at,
        event_type="build.finished",
        event_id="b-0",
        cursor="rewritten",
        payload=original.evidence.payload,
        position=first.position,
    )
    tampered[first.position or ""] = ReplayInput(altered, original.arrival)
    outbox = {k: v for k, v in recorded.outbox.items() if k != recorded.receipts[3].delivery_key}
    changed = History(
        history.definitions, tampered, history.receipts, history.selected, outbox, history.read_at
    )
    kinds = {d.position: d.kind for d in replay(changed).differences}
    assert kinds == {
        first.position: DifferenceKind.EVIDENCE,
        recorded.receipts[3].position: DifferenceKind.OUTBOX_MISSING,
    }


def test_replay_of_once_watch_closed_earlier_reports_later_inputs_not_evaluated() -> None:
    once = definition({"eq": ["status", "failed"]}, mode="once")
    rec = Recorder(once)
    rec.run(event(0, "passed"))
    rec.run(event(1, "failed"))
    wider = definition({"exists": "status"}, mode="once")
    report = replay(rec.history(), override=wider)
    kinds = [d.kind for d in report.differences]
    assert kinds == [DifferenceKind.DECISION, DifferenceKind.NOT_EVALUATED]


def test_range_bounds_parse_instants_offsets_and_ends() -> None:
    assert Bound.parse(None, end=True).latest
    assert Bound.parse("2026-11-29T12:00:00Z", end=False).instant == T0
    offsets = Bound.parse("events:0:100,ticks:1:7", end=False)
    assert offsets.offset_for("events", 0) == 100 and offsets.offset_for("ticks", 1) == 7
    assert offsets.offset_for("events", 1) is None
    with pytest.raises(ConfigError):
        Bound.parse("yesterday", end=False)


def test_scope_parses_ids_keys_and_subjects() -> None:
    assert Scope.parse("w", "acme/u-42") == Scope("acme", "u-42", "w")
    assert Scope.parse('["acme", "u-42", "w"]', None) == Scope("acme", "u-42", "w")
    assert Scope.parse(None, '["acme","u-42"]').covers("acme", "u-42", "any")
    assert not Scope.parse("w", None).covers("acme", "u-42", "other")
    with pytest.raises(DefinitionError):
        Scope.parse(None, "acme")


def test_replay_keeps_dedupe_memory_across_a_receipt_whose_input_is_gone(
    recorded: Recorder,
) -> None:
    first = recorded.receipts[0].position or ""
    history = recorded.history()
    inputs = {pos: item for pos, item in history.inputs.items() if pos != first}
    report = replay(History(history.definitions, inputs, history.receipts, history.selected))
    assert report.skipped == {SkipReason.INPUT_MISSING: 1}
    assert report.differences == []  # the later b-0 duplicate still makes no second entry


def test_replay_renders_each_message_again_and_reports_an_entry_whose_message_differs() -> None:
    template = {"target": "ops-hook", "verb": "notify", "message": "{event_id} on {payload.branch}"}
    rec = Recorder(definition(delivery=template, privacy={"retain_paths": ["branch"]}))
    for n in range(3):
        rec.run(event(n, "failed", "release/1.2"))
    assert [e.message for e in rec.outbox.values() if e] == [
        f"b-{n} on release/1.2" for n in range(3)
    ]
    assert replay(rec.history()).differences == []
    first = rec.receipts[0].delivery_key or ""
    entry = rec.outbox[first]
    assert entry is not None
    rec.outbox[first] = entry._replace(message="b-0 on main")
    second = rec.outbox[rec.receipts[1].delivery_key or ""]
    assert second is not None
    rec.outbox[second.delivery_key] = second._replace(message=None)
    (found,) = replay(rec.history()).differences  # None: an entry from before messages
    assert (found.position, found.kind) == (
        rec.receipts[0].position,
        DifferenceKind.OUTBOX_MISMATCH,
    )


def schedule_fire(n: int, at: datetime, *, late: bool = False) -> Evidence:
    """A schedule tick of the watcher, made on time (``late``: by a ticker that was down)."""
    return Evidence(
        source_kind=EvidenceKind.SCHEDULE,
        source_id="ci.pipeline",
        observed_at=at,
        scheduled_at=at,
        late=late,
        watcher_key=(TENANT, USER, WATCHER),
        position=f"vigil.ticks:0:{n}",
    )


def schedule_definition(source: dict[str, Any]) -> WatcherDefinition:
    body = {
        "watcher_id": WATCHER,
        "purpose": "ops.alert",
        "source": {"kind": "schedule", "source_id": "ci.pipeline", **source},
        "delivery": {"target": "ops-hook", "verb": "send", "text": "stretch"},
    }
    return WatcherDefinition.from_json(body, tenant_id=TENANT, user_id=USER).with_version(1)


def test_replay_reproduces_late_flags_of_schedule_fires_and_reports_a_changed_one() -> None:
    rec = Recorder(schedule_definition({"at": "2026-11-29T12:00:00Z"}))
    rec.run(schedule_fire(0, T0), delay=timedelta(minutes=7))  # the evaluator was down
    later = Recorder(schedule_definition({"cron": "* * * * *", "timezone": "UTC"}))
    later.run(schedule_fire(1, T0), delay=timedelta(seconds=1))  # on time
    later.run(schedule_fire(2, T0 + timedelta(minutes=1)), delay=timedelta(minutes=2))  # late
    later.run(schedule_fire(3, T0 + timedelta(minutes=2), late=True))  # missed: recorded only
    entries = [*rec.outbox.values(), *later.outbox.values()]
    assert [e.late for e in entries if e is not None] == [True, False, True]
    assert [r.reason for r in later.receipts][-1] is Reason.MISSED
    assert replay(rec.history()).differences == []
    assert replay(later.history()).differences == []
    key = next(iter(rec.outbox))
    entry = rec.outbox[key]
    assert entry is not None
    rec.outbox[key] = entry._replace(late=False)
    kinds = [d.kind for d in replay(rec.history()).differences]
    assert kinds == [DifferenceKind.OUTBOX_MISMATCH]
