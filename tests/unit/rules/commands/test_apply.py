"""The pure command decision: every verb, every refusal code, and the records' Avro round trip."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from consumers.commands.registry import SubjectIndex
from pipeline.cli.grant_cmd import parse_until
from pipeline.kafka.serde import default_codec
from pipeline.ops.validate import load_definition
from pipeline.records.command import (
    command_from_value,
    command_value,
    decode_command,
    encode_command,
)
from pipeline.records.command_result import decode_result, encode_result
from pipeline.records.grant import decode_grant, encode_grant
from pipeline.records.registry_entry import decode_entry, encode_entry
from pipeline.rules.authz import Action, Grant, Principal, Role
from pipeline.rules.commands import (
    AGENT_CAP,
    Command,
    CommandOutcome,
    CommandVerb,
    GrantRecord,
    GrantSpec,
    RegistryEntry,
    ResultCode,
    Shred,
    apply,
    grant_id_for,
)
from pipeline.rules.commands.limits import DEFAULT_LIMITS, Limits
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.errors import DefinitionError, ErasedError
from pipeline.rules.keys import subject_key, watcher_key
from pipeline.rules.lifecycle import CloseReason
from pipeline.runtime.tables import Table, TableSpec
from tests.keyring import ring_with, sealed_command_value

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TENANT, USER = "acme", "u-42"
_ids = itertools.count()

OWNER = Principal(name="owner", role=Role.USER, tenant_id=TENANT, user_id=USER)
OPERATOR = Principal(name="op", role=Role.OPERATOR, tenant_id="ops", user_id="root")
SYSTEM = Principal(name="evaluator", role=Role.SYSTEM, tenant_id="-", user_id="-")


def agent(session: str = "s-1") -> Principal:
    return Principal(
        name="agent", role=Role.AGENT, tenant_id=TENANT, user_id=USER, session_id=session
    )


def definition(
    watcher_id: str = "w-1", source_id: str = "ci.pipeline", **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "watcher_id": watcher_id,
        "purpose": "ops.alert",
        "source": {
            "kind": "event",
            "source_id": source_id,
            "event_type": "build.finished",
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "ops-hook"},
        "expires_at": "2027-06-01T00:00:00Z",
    }
    body.update(extra)
    return body


def agent_watch(watcher_id: str = "aw-1", session: str = "s-1", run: str = "r-1") -> dict[str, Any]:
    return {
        "watcher_id": watcher_id,
        "purpose": "agent.watch",
        "mode": "once",
        "source": {
            "kind": "polling",
            "source_id": f"run:{run}",
            "tool": "workflow.run.status@v1",
            "target": run,
            "cadence": "5m",
            "max_age": "2m",
        },
        "condition": {"eq": ["status", "succeeded"]},
        "terminal_condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "in-app"},
        "window": "1h",
        "session_id": session,
    }


def grant_record(
    *actions: Action,
    sources: tuple[str, ...] = ("ci.pipeline", "ci.other", "run:r-1", "run:r-2", "run:r-3"),
    purpose: str = "ops.alert",
    targets: tuple[str, ...] = ("ops-hook", "in-app"),
    until: datetime = NOW + timedelta(days=1),
    grant_id: str = "g-1",
    user_id: str = USER,
) -> GrantRecord:
    spec = GrantSpec(
        tenant_id=TENANT,
        user_id=user_id,
        purpose=purpose,
        sources=sources,
        tools=("workflow.run.status@v1",),
        targets=targets,
        actions=actions or (Action.MANAGE,),
        until=until,
    )
    grant = Grant(
        grant_id=grant_id,
        tenant_id=spec.tenant_id,
        user_id=spec.user_id,
        purpose=spec.purpose,
        sources=frozenset(spec.sources),
        tools=frozenset(spec.tools),
        targets=frozenset(spec.targets),
        actions=frozenset(spec.actions),
        until=spec.until,
    )
    return GrantRecord(grant, NOW, "op")


GRANTS = {
    "g-1": grant_record(Action.MANAGE),
    "g-2": grant_record(
        Action.PROPOSE, Action.APPROVE, Action.MANAGE, purpose="agent.watch", grant_id="g-2"
    ),
}


def command(verb: CommandVerb, principal: Principal = OWNER, **fields: Any) -> Command:
    return Command(
        request_id=f"r-{next(_ids)}",
        verb=verb,
        principal=principal,
        tenant_id=fields.pop("tenant_id", TENANT),
        user_id=fields.pop("user_id", USER),
        issued_at=NOW,
        **fields,
    )


class Subject:
    """One subject's registry view, applying each outcome's registry writes like the consumer."""

    def __init__(
        self, grants: dict[str, GrantRecord] | None = None, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self.view: dict[str, RegistryEntry] = {}
        self.grants = dict(GRANTS if grants is None else grants)
        self.now = NOW
        self.limits = limits

    def run(self, verb: CommandVerb, principal: Principal = OWNER, **fields: Any) -> CommandOutcome:
        cmd = command(verb, principal, **fields)
        outcome = apply(cmd, self.view, self.grants, self.now, self.limits)
        for watcher_id, entry in outcome.registry:
            if entry is None:
                self.view.pop(watcher_id, None)
            else:
                self.view[watcher_id] = entry
        for grant_id, record in outcome.grants:
            if record is None:
                self.grants.pop(grant_id, None)
            else:
                self.grants[grant_id] = record
        return outcome

    def ok(self, verb: CommandVerb, principal: Principal = OWNER, **fields: Any) -> dict[str, Any]:
        outcome = self.run(verb, principal, **fields)
        assert outcome.result.ok, outcome.result.error
        assert outcome.result.result is not None
        return outcome.result.result

    def refused(
        self, verb: CommandVerb, principal: Principal = OWNER, **fields: Any
    ) -> tuple[ResultCode, str | None]:
        outcome = self.run(verb, principal, **fields)
        error = outcome.result.error
        assert error is not None, outcome.result
        assert not (outcome.registry or outcome.watchers or outcome.lifecycle or outcome.grants)
        assert not outcome.outbox
        return error.code, error.field


# --- create ---------------------------------------------------------------------------------


def test_create_accepts_version_one_active_and_writes_every_topic() -> None:
    subject = Subject()
    outcome = subject.run(CommandVerb.CREATE, definition=definition())
    result = outcome.result.result
    assert result is not None
    assert (result["status"], result["version"], result["revision"]) == ("active", 1, 1)
    assert result["activated_at"] == "2026-11-29T12:00:00.000000Z"
    assert [(w.watcher_id, w.source_id, w.entry is not None) for w in outcome.watchers] == [
        ("w-1", "ci.pipeline", True)
    ]
    assert [(c.watcher_id, c.status, c.version) for c in outcome.lifecycle] == [
        ("w-1", "active", 1)
    ]
    assert [e.version for e in outcome.definitions] == [1]


@pytest.mark.parametrize("verb", [None, CommandVerb.PAUSE])
def test_create_of_a_live_id_is_a_conflict(verb: CommandVerb | None) -> None:
    subject = Subject()
    subject.ok(CommandVerb.CREATE, definition=definition())
    if verb is not None:
        subject.ok(verb, watcher_id="w-1")
    assert subject.refused(CommandVerb.CREATE, definition=definition()) == (
        ResultCode.CONFLICT,
        "watcher_id",
    )


def test_create_of_a_proposed_id_is_a_conflict() -> None:
    subject = Subject()
    subject.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch())
    other = agent_watch(run="r-2")
    assert subject.refused(CommandVerb.PROPOSE, agent(), definition=other)[0] is ResultCode.CONFLICT


def test_create_of_a_cancelled_id_is_the_next_version_and_tombstones_a_moved_source() -> None:
    subject = Subject()
    subject.ok(CommandVerb.CREATE, definition=definition())
    subject.ok(CommandVerb.CANCEL, watcher_id="w-1")
    outcome = subject.run(CommandVerb.CREATE, definition=definition(source_id="ci.other"))
    result = outcome.result.result
    assert result is not None
    assert (result["version"], result["revision"], result["status"]) == (2, 3, "active")
    assert [(w.source_id, w.entry is None) for w in outcome.watchers] == [
        ("ci.pipeline", True),
        ("ci.other", False),
    ]


def test_create_with_a_broken_definition_is_invalid_naming_the_field() -> None:
    subject = Subject()
    broken = definition()
    broken["source"] = {**broken["source"], "max_age": "soon"}
    assert subject.refused(CommandVerb.CREATE, definition=broken) == (
        ResultCode.INVALID,
        "source.max_age",
    )
    versioned = definition(version=3)
    assert subject.refused(CommandVerb.CREATE, definition=versioned) == (
        ResultCode.INVALID,
        "version",
    )
    assert subject.refused(CommandVerb.CREATE) == (ResultCode.INVALID, "definition")
    assert subject.refused(CommandVerb.CREATE, definition=agent_watch()) == (
        ResultCode.INVALID,
        "session_id",
    )


@pytest.mark.parametrize(
    "grants",
    [
        {},
        {"g": grant_record(Action.EVALUATE, Action.DELIVER)},
        {"g": grant_record(Action.MANAGE, until=NOW)},
        {"g": grant_record(Action.MANAGE, targets=("other-hook",))},
        {"g": grant_record(Action.MANAGE, purpose="ops.other")},
        {"g": grant_record(Action.MANAGE, sources=("ci.other",))},
    ],
    ids=["no-grant", "no-manage", "expired", "target", "purpose", "source"],
)
def test_create_without_a_covering_grant_is_denied(grants: dict[str, GrantRecord]) -> None:
    assert Subject(grants).refused(CommandVerb.CREATE, definition=definition())[0] is (
        ResultCode.DENIED
    )


def test_roles_decide_before_grants() -> None:
    subject = Subject()
    assert subject.refused(CommandVerb.CREATE, agent(), definition=definition())[0] is (
        ResultCode.DENIED
    )
    stranger = Principal(name="x", role=Role.USER, tenant_id=TENANT, user_id="u-7")
    assert subject.refused(CommandVerb.CREATE, stranger, definition=definition())[0] is (
        ResultCode.DENIED
    )
    subject.ok(CommandVerb.CREATE, OPERATOR, definition=definition())
    for verb in (CommandVerb.SHOW, CommandVerb.PAUSE, CommandVerb.CANCEL):
        assert subject.refused(verb, stranger, watcher_id="w-1") == (
            ResultCode.NOT_FOUND,
            "watcher_id",
        )
    foreign = Principal(name="y", role=Role.MANAGER, tenant_id="other", user_id=USER)
    assert subject.refused(CommandVerb.SHOW, foreign, watcher_id="w-1")[0] is ResultCode.NOT_FOUND
    manager = Principal(name="m", role=Role.MANAGER, tenant_id=TENANT, user_id="boss")
    assert subject.ok(CommandVerb.SHOW, manager, watcher_id="w-1")["status"] == "active"


# --- update ---------------------------------------------------------------------------------


def test_update_checks_the_expected_revision() -> None:
    subject = Subject()
    subject.ok(CommandVerb.CREATE, definition=definition())
    subject.ok(CommandVerb.PAUSE, watcher_id="w-1")
    changed = definition(condition={"eq": ["status", "broken"]})
    assert subject.refused(CommandVerb.UPDATE, definition=changed, expected_revision=1) == (
        ResultCode.STALE_REVISION,
        "expected_revision",
    )
    result = subject.ok(CommandVerb.UPDATE, definition=changed, expected_revision=2)
    assert (result["version"], result["revision"], result["status"]) == (2, 3, "paused")
    assert result["definition"]["condition"] == {"eq": ["status", "broken"]}
    assert subject.view["w-1"].created_at == NOW


def test_update_must_name_the_revision_it_read_and_a_missing_or_stale_one_changes_nothing() -> None:
    subject = Subject()
    assert subject.refused(CommandVerb.UPDATE, definition=definition(), expected_revision=1) == (
        ResultCode.NOT_FOUND,
        "watcher_id",
    )
    subject.ok(CommandVerb.CREATE, definition=definition())
    before = dict(subject.view)
    changed = definition(condition={"eq": ["status", "broken"]})
    for revision in (None, 0, 2):
        assert subject.refused(
            CommandVerb.UPDATE, definition=changed, expected_revision=revision
        ) == (
            ResultCode.STALE_REVISION,
            "expected_revision",
        )
    assert subject.view == before
    assert subject.ok(CommandVerb.UPDATE, definition=changed, expected_revision=1)["version"] == 2
    subject.ok(CommandVerb.CANCEL, watcher_id="w-1")
    assert subject.refused(CommandVerb.UPDATE, definition=definition(), expected_revision=3) == (
        ResultCode.CONFLICT,
        "watcher_id",
    )


def test_update_moving_the_source_tombstones_the_old_watchers_key_first() -> None:
    subject = Subject()
    subject.ok(CommandVerb.CREATE, definition=definition())
    outcome = subject.run(
        CommandVerb.UPDATE, definition=definition(source_id="ci.other"), expected_revision=1
    )
    assert [(w.source_id, w.entry is None) for w in outcome.watchers] == [
        ("ci.pipeline", True),
        ("ci.other", False),
    ]
    assert [e.version for e in outcome.definitions] == [2]


# --- lifecycle ------------------------------------------------------------------------------


def test_pause_resume_cancel_move_the_lifecycle_and_illegal_moves_conflict() -> None:
    subject = Subject()
    subject.ok(CommandVerb.CREATE, definition=definition())
    assert subject.ok(CommandVerb.PAUSE, watcher_id="w-1")["status"] == "paused"
    assert subject.refused(CommandVerb.PAUSE, watcher_id="w-1")[0] is ResultCode.CONFLICT
    assert subject.ok(CommandVerb.RESUME, watcher_id="w-1", expected_revision=2)["status"] == (
        "active"
    )
    cancelled = subject.run(CommandVerb.CANCEL, watcher_id="w-1")
    assert [(c.status, c.reason) for c in cancelled.lifecycle] == [
        ("cancelled", CloseReason.CANCELLED)
    ]
    assert subject.refused(CommandVerb.RESUME, watcher_id="w-1")[0] is ResultCode.CONFLICT
    assert subject.refused(CommandVerb.PAUSE, watcher_id="nope") == (
        ResultCode.NOT_FOUND,
        "watcher_id",
    )
    assert subject.refused(CommandVerb.PAUSE) == (ResultCode.INVALID, "watcher_id")


def test_a_revoked_grant_refuses_every_management_and_erasure_verb_and_changes_nothing() -> None:
    subject = Subject()
    subject.ok(CommandVerb.CREATE, definition=definition())
    subject.ok(CommandVerb.PAUSE, watcher_id="w-1")
    subject.grants.clear()
    before = dict(subject.view)
    for verb in (CommandVerb.SHOW, CommandVerb.PAUSE, CommandVerb.RESUME, CommandVerb.CANCEL):
        assert subject.refused(verb, watcher_id="w-1")[0] is ResultCode.DENIED, verb
    assert subject.refused(CommandVerb.LIST)[0] is ResultCode.DENIED
    assert subject.refused(CommandVerb.ERASE, OPERATOR)[0] is ResultCode.DENIED
    changed = definition(condition={"eq": ["status", "broken"]})
    assert (
        subject.refused(CommandVerb.UPDATE, definition=changed, expected_revision=2)[0]
        is ResultCode.DENIED
    )
    assert subject.view == before


def test_a_grant_for_another_purpose_hides_a_watcher_from_list_but_does_not_deny_it() -> None:
    subject = Subject({"g-2": GRANTS["g-2"]})  # agent.watch only
    subject.grants["g-1"] = GRANTS["g-1"]
    subject.ok(CommandVerb.CREATE, definition=definition())
    subject.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch())
    del subject.grants["g-1"]
    assert [w["watcher_id"] for w in subject.ok(CommandVerb.LIST)["watchers"]] == ["aw-1"]


# --- agent watches: propose, approve, caps, collapse ---------------------------------------


def test_an_agent_proposes_and_only_the_owner_approves() -> None:
    subject = Subject()
    proposed = subject.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch())
    assert (proposed["status"], proposed["activated_at"]) == ("proposed", None)
    assert subject.refused(CommandVerb.APPROVE, agent(), watcher_id="aw-1")[0] is (
        ResultCode.DENIED
    )
    approved = subject.ok(CommandVerb.APPROVE, watcher_id="aw-1")
    assert (approved["status"], approved["activated_at"]) == (
        "active",
        "2026-11-29T12:00:00.000000Z",
    )
    assert subject.refused(CommandVerb.APPROVE, watcher_id="aw-1")[0] is ResultCode.CONFLICT


def test_an_agent_cannot_propose_for_another_session_or_without_a_propose_grant() -> None:
    subject = Subject()
    assert subject.refused(CommandVerb.PROPOSE, agent("s-2"), definition=agent_watch())[0] is (
        ResultCode.DENIED
    )
    only_manage = Subject({"g": grant_record(Action.MANAGE, purpose="agent.watch")})
    assert only_manage.refused(CommandVerb.PROPOSE, agent(), definition=agent_watch())[0] is (
        ResultCode.DENIED
    )


def test_an_identical_live_proposal_collapses_onto_the_existing_id() -> None:
    subject = Subject()
    subject.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch("aw-1"))
    again = subject.run(CommandVerb.PROPOSE, agent(), definition=agent_watch("aw-9"))
    assert again.result.result is not None
    assert (again.result.result["watcher_id"], again.result.result["collapsed"]) == ("aw-1", True)
    assert not (again.registry or again.watchers)
    subject.ok(CommandVerb.APPROVE, watcher_id="aw-1")
    still = subject.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch("aw-9"))
    assert still["watcher_id"] == "aw-1"
    subject.ok(CommandVerb.CANCEL, watcher_id="aw-1")
    fresh = subject.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch("aw-9"))
    assert (fresh["watcher_id"], fresh["status"]) == ("aw-9", "proposed")


def test_a_fourth_active_watch_in_a_session_reaches_the_cap() -> None:
    subject = Subject()
    runs = ["r-1", "r-2", "r-3"]
    for n, run in enumerate(runs):
        subject.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch(f"aw-{n}", run=run))
        subject.ok(CommandVerb.APPROVE, watcher_id=f"aw-{n}")
    fourth = agent_watch("aw-3", run="r-1")
    fourth["condition"] = {"eq": ["status", "cancelled"]}
    subject.ok(CommandVerb.PROPOSE, agent(), definition=fourth)
    assert subject.refused(CommandVerb.APPROVE, watcher_id="aw-3") == (
        ResultCode.CAP_REACHED,
        "session_id",
    )
    other_session = agent_watch("aw-4", session="s-2")
    subject.ok(CommandVerb.PROPOSE, agent("s-2"), definition=other_session)
    assert subject.ok(CommandVerb.APPROVE, watcher_id="aw-4")["status"] == "active"
    subject.ok(CommandVerb.PAUSE, watcher_id="aw-0")
    subject.ok(CommandVerb.APPROVE, watcher_id="aw-3")
    assert subject.refused(CommandVerb.RESUME, watcher_id="aw-0")[0] is ResultCode.CAP_REACHED
    assert AGENT_CAP == 3


# --- close (from the evaluator) and erase ---------------------------------------------------


def test_close_from_the_system_principal_closes_with_its_reason() -> None:
    subject = Subject()
    subject.ok(CommandVerb.CREATE, definition=definition())
    assert (
        subject.refused(CommandVerb.CLOSE, watcher_id="w-1", reason=CloseReason.EXPIRED)[0]
        is ResultCode.DENIED
    )
    assert subject.refused(CommandVerb.CLOSE, SYSTEM, watcher_id="w-1") == (
        ResultCode.INVALID,
        "reason",
    )
    stale = subject.run(
        CommandVerb.CLOSE, SYSTEM, watcher_id="w-1", version=7, reason=CloseReason.EXPIRED
    )
    assert stale.result.result is not None and stale.result.result["applied"] is False
    assert stale.registry == ()
    closed = subject.ok(
        CommandVerb.CLOSE, SYSTEM, watcher_id="w-1", version=1, reason=CloseReason.EXPIRED
    )
    assert (closed["status"], closed["closed_reason"]) == ("expired", "expired")
    twice = subject.run(CommandVerb.CLOSE, SYSTEM, watcher_id="w-1", reason=CloseReason.EXPIRED)
    assert twice.result.ok and twice.registry == ()


def test_close_satisfied_of_a_proposed_watch_is_a_conflict() -> None:
    subject = Subject()
    subject.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch())
    assert (
        subject.refused(CommandVerb.CLOSE, SYSTEM, watcher_id="aw-1", reason=CloseReason.SATISFIED)[
            0
        ]
        is ResultCode.CONFLICT
    )


def test_erase_shreds_keys_revokes_grants_tombstones_every_watcher_and_writes_one_record() -> None:
    other = grant_record(Action.MANAGE, user_id="u-7", grant_id="g-other")
    subject = Subject({**GRANTS, "g-other": other})
    subject.ok(CommandVerb.CREATE, definition=definition("w-1"))
    subject.ok(CommandVerb.CREATE, definition=definition("w-2", source_id="ci.other"))
    stranger = Principal(name="x", role=Role.USER, tenant_id=TENANT, user_id="u-7")
    assert subject.refused(CommandVerb.ERASE, stranger)[0] is ResultCode.DENIED
    outcome = subject.run(CommandVerb.ERASE)
    assert outcome.result.result == {
        "tenant_id": TENANT,
        "user_id": USER,
        "erased": 2,
        "watcher_ids": ["w-1", "w-2"],
        "grants_revoked": 2,
    }
    assert outcome.shred == (Shred(None),), "every data key of the subject"
    assert sorted(outcome.grants) == [("g-1", None), ("g-2", None)]
    assert subject.grants == {"g-other": other}, "another subject's grant stays"
    assert [(w.source_id, w.entry) for w in outcome.watchers] == [
        ("ci.pipeline", None),
        ("ci.other", None),
    ]
    assert [(c.watcher_id, c.tombstone) for c in outcome.lifecycle] == [
        ("w-1", True),
        ("w-2", True),
        (None, False),
    ]
    assert outcome.lifecycle[-1].status == "erased"
    assert subject.view == {}


# --- show and list --------------------------------------------------------------------------


def test_list_shows_live_watchers_unless_a_state_is_asked_for() -> None:
    subject = Subject()
    subject.ok(CommandVerb.CREATE, definition=definition("w-1"))
    subject.ok(CommandVerb.CREATE, definition=definition("w-2"))
    subject.ok(CommandVerb.CANCEL, watcher_id="w-2")
    subject.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch())
    live = subject.ok(CommandVerb.LIST)["watchers"]
    assert [w["watcher_id"] for w in live] == ["aw-1", "w-1"]
    cancelled = subject.ok(CommandVerb.LIST, state="cancelled")["watchers"]
    assert [w["watcher_id"] for w in cancelled] == ["w-2"]
    session = subject.ok(CommandVerb.LIST, session_id="s-1")["watchers"]
    assert [w["watcher_id"] for w in session] == ["aw-1"]
    # An agent lists only the schedules its session created: not its proposals.
    assert subject.ok(CommandVerb.LIST, agent())["watchers"] == []
    assert subject.ok(CommandVerb.SHOW, watcher_id="w-2")["closed_reason"] == "cancelled"


# --- grants ---------------------------------------------------------------------------------


def spec(**overrides: Any) -> GrantSpec:
    fields: dict[str, Any] = {
        "tenant_id": TENANT,
        "user_id": USER,
        "purpose": "ops.alert",
        "sources": ("ci.pipeline", "ci.other"),
        "targets": ("ops-hook",),
        "actions": (Action.MANAGE, Action.EVALUATE),
        "until": NOW + timedelta(days=30),
    }
    fields.update(overrides)
    return GrantSpec(**fields)


def test_grant_add_is_an_operator_verb_with_an_id_derived_from_the_request() -> None:
    subject = Subject({})
    assert subject.refused(CommandVerb.GRANT_ADD, OWNER, grant=spec())[0] is ResultCode.DENIED
    cmd = command(CommandVerb.GRANT_ADD, OPERATOR, grant=spec())
    first, again = apply(cmd, {}, {}, NOW), apply(cmd, {}, {}, NOW)
    assert first.grants == again.grants
    assert first.result.result is not None
    assert first.result.result["grant_id"] == grant_id_for(cmd.request_id)
    assert first.result.result["actions"] == ["evaluate", "manage"]
    assert subject.refused(
        CommandVerb.GRANT_ADD, OPERATOR, grant=spec(until=NOW - timedelta(seconds=1))
    ) == (ResultCode.INVALID, "until")
    assert subject.refused(CommandVerb.GRANT_ADD, OPERATOR, grant=spec(user_id="u-7")) == (
        ResultCode.INVALID,
        "grant",
    )
    assert subject.refused(CommandVerb.GRANT_ADD, OPERATOR) == (ResultCode.INVALID, "grant")


def test_a_granted_subject_can_create_and_revoking_the_grant_stops_it() -> None:
    subject = Subject({})
    grant_id = subject.ok(CommandVerb.GRANT_ADD, OPERATOR, grant=spec())["grant_id"]
    subject.ok(CommandVerb.CREATE, definition=definition())
    listed = subject.ok(CommandVerb.GRANT_LIST, OPERATOR)["grants"]
    assert [g["grant_id"] for g in listed] == [grant_id]
    assert subject.ok(CommandVerb.GRANT_REVOKE, OPERATOR, grant_id=grant_id) == {
        "revoked": [grant_id],
        "narrowed": [],
    }
    assert subject.refused(CommandVerb.CREATE, definition=definition("w-2"))[0] is (
        ResultCode.DENIED
    )
    assert subject.refused(CommandVerb.GRANT_REVOKE, OPERATOR, grant_id=grant_id) == (
        ResultCode.NOT_FOUND,
        "grant_id",
    )


def test_grant_revoke_by_source_removes_single_source_grants_and_narrows_the_rest() -> None:
    subject = Subject({})
    wide = subject.ok(CommandVerb.GRANT_ADD, OPERATOR, grant=spec())["grant_id"]
    narrow = subject.ok(CommandVerb.GRANT_ADD, OPERATOR, grant=spec(sources=("ci.pipeline",)))[
        "grant_id"
    ]
    result = subject.ok(CommandVerb.GRANT_REVOKE, OPERATOR, source_id="ci.pipeline")
    assert result == {"revoked": [narrow], "narrowed": [wide]}
    assert subject.grants[wide].grant.sources == frozenset({"ci.other"})
    assert subject.refused(CommandVerb.GRANT_REVOKE, OPERATOR, source_id="ci.pipeline") == (
        ResultCode.NOT_FOUND,
        "source_id",
    )
    assert subject.refused(CommandVerb.GRANT_REVOKE, OPERATOR) == (ResultCode.INVALID, "grant_id")
    assert subject.refused(CommandVerb.GRANT_LIST, OWNER)[0] is ResultCode.DENIED


# --- records --------------------------------------------------------------------------------


def test_records_round_trip_through_their_avro_schemas_with_content_sealed() -> None:
    codec = default_codec()
    ring = ring_with(subject_owner(TENANT, USER))
    subject = Subject()
    cmd = command(CommandVerb.CREATE, definition=definition(), expected_revision=4)
    raw = encode_command(codec, ring, cmd)
    assert b"ci.pipeline" not in raw, "the definition travels sealed"
    assert decode_command(codec, ring, raw) == cmd
    grant_cmd = command(CommandVerb.GRANT_ADD, OPERATOR, grant=spec())
    assert decode_command(codec, ring, encode_command(codec, ring, grant_cmd)) == grant_cmd
    outcome = subject.run(CommandVerb.CREATE, definition=definition())
    entry = subject.view["w-1"]
    raw = encode_entry(codec, ring, entry)
    assert b"ci.pipeline" in raw and b'"condition"' not in raw, "routing plain, body sealed"
    assert decode_entry(codec, ring, raw) == entry
    owner = subject_owner(TENANT, USER)
    raw = encode_result(codec, ring, outcome.result, owner)
    assert b'"condition"' not in raw
    assert decode_result(codec, ring, raw) == outcome.result
    record = GRANTS["g-2"]
    assert decode_grant(codec, encode_grant(codec, record)) == record


def test_a_command_record_that_breaks_a_rule_names_the_field() -> None:
    ring = ring_with()
    record = command_value(command(CommandVerb.SHOW, watcher_id="w-1"), ring)
    with pytest.raises(DefinitionError) as caught:
        command_from_value({**record, "request_id": "has spaces"}, ring)
    assert caught.value.field == "request_id"
    with pytest.raises(DefinitionError) as caught:
        command_from_value({**record, "verb": "explode"}, ring)
    assert caught.value.field == "verb"


def test_a_command_whose_subject_key_is_shredded_is_refused_as_erased() -> None:
    owner = subject_owner(TENANT, USER)
    ring = ring_with(owner)
    record = command_value(command(CommandVerb.CREATE, definition=definition()), ring)
    ring.apply(owner.topic_key, None)
    with pytest.raises(DefinitionError) as caught:
        command_from_value(record, ring)
    assert caught.value.field == "definition" and "erased" in caught.value.message


def test_a_command_with_content_is_never_written_without_its_subject_key() -> None:
    with pytest.raises(ErasedError):
        command_value(command(CommandVerb.CREATE, definition=definition()), ring_with())


def test_a_result_with_a_refusal_seals_its_message_when_the_subject_has_a_key() -> None:
    codec = default_codec()
    owner = subject_owner(TENANT, USER)
    ring = ring_with(owner)
    refusal = Subject().run(CommandVerb.SHOW, watcher_id="secret-watcher-name").result
    assert refusal.error is not None and "secret-watcher-name" in refusal.error.message
    raw = encode_result(codec, ring, refusal, owner)
    assert b"secret-watcher-name" not in raw
    assert decode_result(codec, ring, raw) == refusal


# --- the CLI's parsing of what it sends (pipeline.cli.watch_cmd, grant_cmd) -----------------


def test_yaml_definitions_keep_instants_and_clock_times_as_text() -> None:
    text = "watcher_id: w-1\nexpires_at: 2027-06-01T00:00:00Z\nstart: 22:00\ncount: 12\n"
    assert load_definition(text) == {
        "watcher_id": "w-1",
        "expires_at": "2027-06-01T00:00:00Z",
        "start": "22:00",
        "count": 12,
    }
    assert load_definition('{"watcher_id": "w-1"}') == {"watcher_id": "w-1"}
    with pytest.raises(DefinitionError):
        load_definition("- just\n- a list\n")


def test_grant_until_takes_an_instant_or_a_duration_from_now() -> None:
    assert parse_until("2027-01-01T00:00:00Z", NOW) == datetime(2027, 1, 1, tzinfo=UTC)
    assert parse_until("30d", NOW) == NOW + timedelta(days=30)
    with pytest.raises(DefinitionError) as caught:
        parse_until("whenever", NOW)
    assert caught.value.field == "until"


def test_a_command_record_whose_json_body_is_broken_names_the_body() -> None:
    ring = ring_with(subject_owner(TENANT, USER))
    record = command_value(command(CommandVerb.SHOW, watcher_id="w-1"), ring)
    with pytest.raises(DefinitionError) as caught:
        command_from_value(sealed_command_value(ring, {**record, "definition": "{not json"}), ring)
    assert caught.value.field == "definition"


def test_a_command_record_with_unsealed_content_is_refused_never_read_as_plaintext() -> None:
    """Issue 27: a record without its sealed field is a downgrade erasure could not reach."""
    ring = ring_with(subject_owner(TENANT, USER))
    record = command_value(command(CommandVerb.SHOW, watcher_id="w-1"), ring)
    for content in ({"definition": '{"watcher_id": "w-1"}'}, {"text": "hello"}):
        with pytest.raises(DefinitionError) as caught:
            command_from_value({**record, **content}, ring)
        assert caught.value.field == "sealed"


def test_the_subject_index_survives_a_rollback_and_rebuilds_for_a_new_table() -> None:
    mine, theirs = subject_key(TENANT, USER), subject_key(TENANT, "u-7")
    table = Table(TableSpec("registry", "t.registry"), 0)
    table.apply(watcher_key(TENANT, USER, "w-1"), b"1")
    table.apply(watcher_key(TENANT, "u-7", "w-1"), b"2")
    index = SubjectIndex()
    assert index.keys(table, mine) == [watcher_key(TENANT, USER, "w-1")]
    table.delete(watcher_key(TENANT, USER, "w-1"))
    table.set(watcher_key(TENANT, USER, "w-2"), b"3")
    index.add(table, watcher_key(TENANT, USER, "w-2"))
    assert index.keys(table, mine) == [watcher_key(TENANT, USER, "w-2")]
    table.rollback()
    assert index.keys(table, mine) == [watcher_key(TENANT, USER, "w-1")]
    # A key gone in a committed transaction leaves the index; no rollback brings it back.
    table.delete(watcher_key(TENANT, USER, "w-1"))
    table.committed()
    assert index.keys(table, mine) == []
    assert mine not in index._index(table)  # nothing of it is held
    fresh = Table(TableSpec("registry", "t.registry"), 0)
    fresh.apply(watcher_key(TENANT, USER, "w-9"), b"4")
    assert index.keys(fresh, mine) == [watcher_key(TENANT, USER, "w-9")]
    assert index.keys(fresh, theirs) == []


def test_the_subject_view_decodes_only_changed_values_and_follows_rollbacks() -> None:
    mine = subject_key(TENANT, USER)
    table = Table(TableSpec("registry", "t.registry"), 0)
    k1, k2 = watcher_key(TENANT, USER, "w-1"), watcher_key(TENANT, USER, "w-2")
    table.apply(k1, b"one")
    table.apply(watcher_key(TENANT, "u-7", "w-1"), b"theirs")
    decoded: list[bytes] = []
    subject = Subject()
    subject.ok(CommandVerb.CREATE, definition=definition())
    made = subject.view["w-1"]

    def decode(raw: bytes) -> RegistryEntry | None:
        decoded.append(raw)
        if raw == b"erased":
            return None
        return replace(made, watcher_id=raw.decode())

    index = SubjectIndex()
    assert set(index.view(table, mine, decode)) == {"one"}
    assert set(index.view(table, mine, decode)) == {"one"} and decoded == [b"one"], "held"
    table.set(k2, b"two")
    index.add(table, k2)
    table.set(k1, b"erased")
    assert set(index.view(table, mine, decode)) == {"two"}, "an entry that no longer opens"
    table.rollback()
    assert set(index.view(table, mine, decode)) == {"one"}, "the rollback's values again"
    table.delete(k1)
    table.committed()
    assert dict(index.view(table, mine, decode)) == {}
    assert decoded[0] == b"one" and decoded[3:] == [b"one"] and len(decoded) == 4
    assert sorted(decoded[1:3]) == [b"erased", b"two"], "only the changed values, once each"
