"""plan_recovery(): what an authorization failure skipped, decided again with the current grants
at the recorded times — once; never for a once watch; and nothing while the grants still deny."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipeline.rules.outcomes import Reason
from pipeline.rules.recovery import NOTE, plan_recovery
from pipeline.rules.replay import replay
from tests.unit.rules.test_replay import GRANT, T0, Recorder, definition, event

pytestmark = pytest.mark.unit

NOW = T0 + timedelta(days=1)


def _revoked_stretch() -> Recorder:
    """b-1 granted; b-2 (failed), b-3 (passed), b-4 (failed) denied; b-5 granted again."""
    recorder = Recorder(definition())
    recorder.run(event(1, "failed"))
    for n, status in ((2, "failed"), (3, "passed"), (4, "failed")):
        recorder.run(event(n, status), grants=())
    recorder.run(event(5, "failed"))
    return recorder


def test_the_skipped_evaluations_are_decided_with_the_current_grants() -> None:
    recorder = _revoked_stretch()
    plan = plan_recovery(recorder.history(), (GRANT,), NOW)
    decided = {r.receipt.trigger["event_id"]: r for r in plan.recoveries}
    assert sorted(decided) == ["b-2", "b-3", "b-4"]
    assert [decided[i].receipt.reason for i in ("b-2", "b-3", "b-4")] == [
        Reason.CONDITION_TRUE,
        Reason.CONDITION_FALSE,
        Reason.CONDITION_TRUE,
    ]
    assert decided["b-3"].outbox is None
    assert {e.delivery_key for e in plan.entries} == {
        decided["b-2"].receipt.delivery_key,
        decided["b-4"].receipt.delivery_key,
    }
    for recovery in plan.recoveries:
        assert recovery.receipt.note == NOTE and recovery.receipt.authorized is True
        assert recovery.receipt.evaluated_at == recovery.skipped.evaluated_at, "recorded time"
        assert recovery.source_id == "ci.pipeline"


def test_recovered_receipts_mark_their_triggers_decided_and_replay_reproduces_them() -> None:
    recorder = _revoked_stretch()
    first = plan_recovery(recorder.history(), (GRANT,), NOW)
    recorder.receipts.extend(r.receipt for r in first.recoveries)
    for entry in first.entries:
        recorder.outbox[entry.delivery_key] = entry
    again = plan_recovery(recorder.history(), (GRANT,), NOW)
    assert again.recoveries == [] and again.recovered_before == 3
    assert replay(recorder.history()).differences == []


def test_nothing_is_recovered_while_the_current_grants_still_deny() -> None:
    plan = plan_recovery(_revoked_stretch().history(), (), NOW)
    assert plan.recoveries == [] and plan.still_denied == 3
    expired = GRANT.model_copy(update={"until": NOW - timedelta(seconds=1)})
    assert plan_recovery(_revoked_stretch().history(), (expired,), NOW).still_denied == 3


def test_a_key_already_in_the_outbox_is_not_written_again() -> None:
    recorder = _revoked_stretch()
    first = plan_recovery(recorder.history(), (GRANT,), NOW)
    for entry in first.entries:
        recorder.outbox[entry.delivery_key] = entry  # e.g. the same event published again
    plan = plan_recovery(recorder.history(), (GRANT,), NOW)
    assert plan.in_outbox == 2 and plan.entries == [] and len(plan.recoveries) == 3


def test_a_once_watch_is_never_recovered() -> None:
    once = definition(mode="once", expires_at="2030-01-01T00:00:00Z")
    recorder = Recorder(once)
    recorder.run(event(1, "failed"), grants=())
    plan = plan_recovery(recorder.history(), (GRANT,), NOW)
    assert plan.recoveries == [] and plan.once == 1


def test_a_change_watch_is_never_recovered() -> None:
    recorder = Recorder(definition(mode="change"))
    recorder.run(event(1, "failed"), grants=())
    recorder.run(event(2, "failed"))  # the first truth it saw: notified then
    plan = plan_recovery(recorder.history(), (GRANT,), NOW)
    assert plan.recoveries == [] and plan.change == 1
