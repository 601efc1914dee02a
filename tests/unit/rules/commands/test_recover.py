"""The ``replay_apply`` command: operators only, an active watcher at its current version, the
current grants allowing it; the outcome is one audit record and nothing else."""

from __future__ import annotations

import pytest

from pipeline.rules.authz import Action, Principal
from pipeline.rules.commands import CommandVerb, ResultCode
from tests.unit.rules.commands.test_apply import (
    OPERATOR,
    OWNER,
    Subject,
    agent,
    definition,
    grant_record,
)

pytestmark = pytest.mark.unit

EVALUATE = {"g-e": grant_record(Action.MANAGE, Action.EVALUATE, grant_id="g-e")}


def _subject() -> Subject:
    subject = Subject(dict(EVALUATE))
    subject.ok(CommandVerb.CREATE, definition=definition("w-1"))
    return subject


def test_an_operator_apply_is_audited_in_the_definition_log_and_writes_nothing_else() -> None:
    subject = _subject()
    outcome = subject.run(
        CommandVerb.REPLAY_APPLY, OPERATOR, watcher_id="w-1", version=1, text="2 recovered"
    )
    assert outcome.result.ok, outcome.result.error
    (logged,) = outcome.definitions
    assert (logged.watcher_id, logged.version) == ("w-1", 1)
    assert outcome.note == "replay --apply by op: 2 recovered"
    assert not (outcome.registry or outcome.watchers or outcome.lifecycle or outcome.outbox)


@pytest.mark.parametrize("principal", [OWNER, agent()], ids=["owner", "agent"])
def test_only_an_operator_may_apply_a_replay(principal: Principal) -> None:
    subject = _subject()
    code, _ = subject.refused(CommandVerb.REPLAY_APPLY, principal, watcher_id="w-1")
    assert code is ResultCode.DENIED


def test_apply_refuses_another_version_an_unknown_or_paused_watcher() -> None:
    subject = _subject()
    stale = subject.refused(CommandVerb.REPLAY_APPLY, OPERATOR, watcher_id="w-1", version=2)
    assert stale == (ResultCode.CONFLICT, "version")
    unknown = subject.refused(CommandVerb.REPLAY_APPLY, OPERATOR, watcher_id="nope")
    assert unknown == (ResultCode.NOT_FOUND, "watcher_id")
    subject.ok(CommandVerb.PAUSE, watcher_id="w-1", expected_revision=1)
    paused = subject.refused(CommandVerb.REPLAY_APPLY, OPERATOR, watcher_id="w-1")
    assert paused == (ResultCode.CONFLICT, "watcher_id")


def test_apply_is_refused_while_the_current_grants_still_deny_evaluation() -> None:
    subject = _subject()
    subject.grants = {"g-1": grant_record(Action.MANAGE)}  # evaluate revoked
    code, _ = subject.refused(CommandVerb.REPLAY_APPLY, OPERATOR, watcher_id="w-1")
    assert code is ResultCode.DENIED
