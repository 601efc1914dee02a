"""What commands may create: proposals held to seed 003 whatever the body omits, the limits per
subject and per agent session, proposals that expire, and — over generated command sequences by
users, agents and operators — that no sequence ever gives an agent more than DESIGN.md §10 does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rules.agent_watch import generated_id
from pipeline.rules.authz import Action, Role
from pipeline.rules.commands import CommandVerb, ResultCode, apply
from pipeline.rules.commands.limits import Limits, is_schedule
from pipeline.rules.lifecycle import WatcherStatus, is_live
from tests.unit.rules.commands.test_apply import (
    NOW,
    OWNER,
    Subject,
    agent,
    agent_watch,
    command,
    definition,
    grant_record,
)

pytestmark = pytest.mark.unit

LATER = NOW + timedelta(days=365)
LASTING = {
    "g-1": grant_record(Action.MANAGE, until=LATER),
    "g-2": grant_record(
        Action.PROPOSE,
        Action.APPROVE,
        Action.MANAGE,
        purpose="agent.watch",
        grant_id="g-2",
        until=LATER,
    ),
    "g-control": grant_record(
        Action.MANAGE,
        Action.DELIVER,
        purpose="control.chat",
        sources=("control", "schedule:me"),
        targets=("me",),
        grant_id="g-control",
        until=LATER,
    ),
}


def schedule(name: str, verb: str = "send") -> dict[str, Any]:
    delivery: dict[str, Any] = {"target": "me", "verb": verb}
    if verb == "run":
        delivery["args"] = ["/bin/sh", "-c", "id"]
    else:
        delivery["text"] = "hi"
    return {
        "watcher_id": f"schedule:me:{name}",
        "purpose": "control.chat",
        "source": {"kind": "schedule", "at": "2026-11-30T08:00:00Z"},
        "delivery": delivery,
    }


def subject(limits: Limits | None = None) -> Subject:
    return Subject(dict(LASTING), limits or Limits())


# --- every proposal is a bounded agent watch ----------------------------------------------------


def test_a_proposal_that_omits_mode_is_a_once_watch_and_one_without_an_id_gets_a_stable_one() -> (
    None
):
    s = subject()
    body = agent_watch()
    del body["mode"], body["watcher_id"]
    cmd = command(CommandVerb.PROPOSE, agent(), definition=body)
    outcome = apply(cmd, s.view, s.grants, NOW)
    assert outcome.result.ok, outcome.result.error
    view = outcome.result.result
    assert view is not None
    assert view["watcher_id"] == generated_id(cmd.request_id)
    assert view["definition"]["mode"] == "once"
    assert apply(cmd, s.view, s.grants, NOW).result.result == view  # a retry names the same watch


def test_an_agents_proposal_without_a_session_is_bound_to_its_own() -> None:
    s = subject()
    body = agent_watch(session="s-9")
    del body["session_id"]
    assert s.ok(CommandVerb.PROPOSE, agent("s-9"), definition=body)["session_id"] == "s-9"
    assert s.refused(CommandVerb.PROPOSE, agent("s-9"), definition=agent_watch("x", "s-1"))[0] is (
        ResultCode.DENIED
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"mode": "every", "terminal_condition": None}, "mode"),
        ({"window": None, "expires_at": "2036-01-01T00:00:00Z"}, "window"),
        ({"window": None}, "window"),
        ({"window": "48h"}, "window"),
        (
            {
                "source": {
                    "kind": "polling",
                    "source_id": "run:r-1",
                    "tool": "workflow.run.status@v1",
                    "target": "r-1",
                    "cron": "* * * * *",
                    "timezone": "UTC",
                    "missed": "latest",
                    "max_age": "2m",
                }
            },
            "source",
        ),
        (
            {
                "source": {
                    "kind": "polling",
                    "source_id": "run:r-1",
                    "tool": "http.json@v1",
                    "tool_ref": "x",
                    "cadence": "1m",
                    "max_age": "2m",
                }
            },
            "source.tool",
        ),
        (
            {
                "source": {
                    "kind": "event",
                    "source_id": "run:r-1",
                    "event_type": "x",
                    "max_age": "2m",
                },
                "terminal_condition": None,
            },
            "source.kind",
        ),
        ({"source": {**agent_watch()["source"], "cadence": "2m"}}, "source.cadence"),
    ],
)
def test_a_proposal_outside_seed_003s_bounds_is_invalid_whoever_proposes(
    change: dict[str, Any], field: str
) -> None:
    body = {k: v for k, v in {**agent_watch(), **change}.items() if v is not None}
    for who in (agent(), OWNER):
        s = subject()
        assert s.refused(CommandVerb.PROPOSE, who, definition=body) == (ResultCode.INVALID, field)


def test_a_user_proposal_without_a_session_is_invalid() -> None:
    body = agent_watch()
    del body["session_id"]
    assert subject().refused(CommandVerb.PROPOSE, OWNER, definition=body) == (
        ResultCode.INVALID,
        "session_id",
    )


# --- limits -------------------------------------------------------------------------------------


def test_proposals_stop_at_the_subjects_limit_with_cap_reached() -> None:
    s = subject(Limits(proposals=3))
    for n in range(3):
        s.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch(f"p-{n}", run=f"r-{n % 3 + 1}"))
    body = agent_watch("p-3", run="r-1")
    body["condition"] = {"eq": ["status", "cancelled"]}
    assert s.refused(CommandVerb.PROPOSE, agent(), definition=body) == (
        ResultCode.CAP_REACHED,
        "watcher_id",
    )


def test_pending_proposals_stop_at_the_agent_sessions_limit() -> None:
    s = subject(Limits(session_proposals=2))
    for n in range(2):
        s.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch(f"p-{n}", run=f"r-{n + 1}"))
    body = agent_watch("p-2", run="r-3")
    assert s.refused(CommandVerb.PROPOSE, agent(), definition=body) == (
        ResultCode.CAP_REACHED,
        "session_id",
    )
    s.ok(CommandVerb.PROPOSE, agent("s-2"), definition=agent_watch("p-3", run="r-3", session="s-2"))
    s.ok(CommandVerb.APPROVE, watcher_id="p-0")  # approved: no longer pending, room again
    s.ok(CommandVerb.PROPOSE, agent(), definition=body)


def cron(name: str, **extra: Any) -> dict[str, Any]:
    return {
        **schedule(name),
        "source": {"kind": "schedule", "cron": "0 8 * * *", "timezone": "UTC"},
        **extra,
    }


def expiry(s: Subject, name: str) -> datetime | None:
    return s.view[f"schedule:me:{name}"].definition().expires_at


def test_an_agents_cron_schedule_expires_and_no_upsert_makes_it_live_longer() -> None:
    """DESIGN.md §10 "Limits": agent-made cron schedules expire (default 30 days)."""
    s = subject(Limits(agent_cron_ttl=timedelta(days=30)))
    s.ok(CommandVerb.SCHEDULE, agent(), definition=cron("daily"))
    first = expiry(s, "daily")
    assert first == NOW + timedelta(days=30)
    s.now += timedelta(days=10)
    s.ok(CommandVerb.SCHEDULE_UPDATE, agent(), definition=cron("daily"))
    assert expiry(s, "daily") == first  # a chain of upserts cannot renew it
    later = cron("again", expires_at="2027-06-01T00:00:00Z")
    assert s.refused(CommandVerb.SCHEDULE, agent(), definition=later) == (
        ResultCode.INVALID,
        "expires_at",
    )
    s.ok(
        CommandVerb.SCHEDULE, agent(), definition=cron("sooner", expires_at="2027-01-01T00:00:00Z")
    )
    assert expiry(s, "sooner") == datetime(2027, 1, 1, tzinfo=UTC)
    s.ok(CommandVerb.SCHEDULE, OWNER, definition=cron("users"))  # the user's own: no expiry
    assert expiry(s, "users") is None
    s.ok(CommandVerb.SCHEDULE, agent(), definition=schedule("one-shot"))
    assert expiry(s, "one-shot") is None  # a one-shot ends when it fires


def test_watchers_stop_at_the_subjects_limit_and_a_closed_one_frees_its_room() -> None:
    s = subject(Limits(watchers=2))
    s.ok(CommandVerb.CREATE, definition=definition("w-1"))
    s.ok(CommandVerb.CREATE, definition=definition("w-2"))
    assert s.refused(CommandVerb.CREATE, definition=definition("w-3")) == (
        ResultCode.CAP_REACHED,
        "watcher_id",
    )
    s.ok(CommandVerb.CANCEL, watcher_id="w-1")
    s.ok(CommandVerb.CREATE, definition=definition("w-3"))
    # A new version of a live watcher is not a new watcher.
    s.ok(CommandVerb.UPDATE, definition=definition("w-3"), expected_revision=1)


def test_schedules_stop_at_the_subjects_and_the_agent_sessions_limits() -> None:
    s = subject(Limits(schedules=4, session_schedules=2))
    s.ok(CommandVerb.SCHEDULE, agent(), definition=schedule("a"))
    s.ok(CommandVerb.SCHEDULE, agent(), definition=schedule("b"))
    assert s.refused(CommandVerb.SCHEDULE, agent(), definition=schedule("c")) == (
        ResultCode.CAP_REACHED,
        "session_id",
    )
    s.ok(CommandVerb.SCHEDULE_UPDATE, agent(), definition=schedule("b"))  # a replacement fits
    s.ok(CommandVerb.SCHEDULE, agent("s-2"), definition=schedule("c"))
    s.ok(CommandVerb.SCHEDULE, OWNER, definition=schedule("d"))
    assert s.refused(CommandVerb.SCHEDULE, OWNER, definition=schedule("e")) == (
        ResultCode.CAP_REACHED,
        "watcher_id",
    )


def test_a_proposal_not_approved_within_its_ttl_is_forgotten_by_the_next_command() -> None:
    s = subject()
    s.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch("old"))
    s.now = NOW + timedelta(hours=23, minutes=59)
    assert [w["watcher_id"] for w in s.ok(CommandVerb.LIST)["watchers"]] == ["old"]
    s.now = NOW + timedelta(hours=24)
    refused = s.run(CommandVerb.APPROVE, watcher_id="old")
    assert refused.result.error is not None
    assert refused.result.error.code is ResultCode.NOT_FOUND
    assert [(k, e) for k, e in refused.registry] == [("old", None)]  # the refusal forgets it
    assert "old" not in s.view
    outcome = s.run(CommandVerb.LIST)
    assert outcome.result.result == {"watchers": []} and outcome.registry == ()


def test_forgetting_writes_tombstones_on_registry_watchers_and_lifecycle() -> None:
    s = subject()
    s.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch("old"))
    s.now = NOW + timedelta(hours=25)
    outcome = s.run(CommandVerb.PROPOSE, agent(), definition=agent_watch("new", run="r-2"))
    assert outcome.result.ok
    assert [(k, e is None) for k, e in outcome.registry] == [("old", True), ("new", False)]
    assert [(w.watcher_id, w.entry is None) for w in outcome.watchers] == [
        ("old", True),
        ("new", False),
    ]
    assert [(c.watcher_id, c.tombstone) for c in outcome.lifecycle] == [
        ("old", True),
        ("new", False),
    ]


# --- a property: no command sequence gives an agent more than DESIGN.md §10 -------------------

_PRINCIPALS = (OWNER, agent("s-1"), agent("s-2"))


def _steps() -> st.SearchStrategy[tuple[str, int, int, int]]:
    return st.tuples(
        st.sampled_from(
            [
                "propose",
                "approve",
                "schedule",
                "schedule_update",
                "schedule_run",
                "create",
                "cancel",
                "pause",
                "later",
            ]
        ),
        st.integers(0, len(_PRINCIPALS) - 1),
        st.integers(0, 4),  # which name
        st.integers(0, 3),  # which run
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(_steps(), min_size=1, max_size=40))
def test_no_sequence_of_commands_exceeds_a_limit_or_an_agents_power(
    steps: list[tuple[str, int, int, int]],
) -> None:
    limits = Limits(watchers=6, proposals=4, schedules=5, session_schedules=2, session_proposals=2)
    s = subject(limits)
    owners: dict[str, str | None] = {}
    for action, who, name, run in steps:
        principal = _PRINCIPALS[who]
        if action == "later":
            s.now += timedelta(hours=13)
            continue
        before = {k: (e.version, e.status) for k, e in s.view.items()}
        fields: dict[str, Any]
        if action == "propose":
            verb, fields = (
                CommandVerb.PROPOSE,
                {
                    "definition": agent_watch(
                        f"p{name}", run=f"r-{run % 3 + 1}", session=principal.session_id or "s-u"
                    )
                },
            )
        elif action == "approve":
            verb, fields = CommandVerb.APPROVE, {"watcher_id": f"p{name}"}
        elif action in ("schedule", "schedule_update", "schedule_run"):
            verb = (
                CommandVerb.SCHEDULE_UPDATE if action == "schedule_update" else CommandVerb.SCHEDULE
            )
            body = schedule(f"s{name}", "run" if action == "schedule_run" else "send")
            fields = {"definition": body}
        elif action == "create":
            verb, fields = CommandVerb.CREATE, {"definition": definition(f"w{name}")}
        else:
            verb = CommandVerb.CANCEL if action == "cancel" else CommandVerb.PAUSE
            fields = {"watcher_id": f"schedule:me:s{name}" if name % 2 else f"w{name}"}
        outcome = s.run(verb, principal, **fields)
        if principal.role is Role.AGENT and outcome.result.ok:
            # What an agent changed is a proposal or a schedule of its own session, never run.
            for watcher_id, entry in outcome.registry:
                if entry is None:
                    continue
                assert entry.session_id == principal.session_id, (action, watcher_id)
                if is_schedule(watcher_id):
                    assert '"run"' not in entry.definition_json
                    # A live schedule changes only under its own session; a closed id may be
                    # created again by anyone as its next version (ids are reused that way).
                    if (
                        watcher_id in before
                        and is_live(before[watcher_id][1])
                        and action != "cancel"
                    ):
                        assert owners.get(watcher_id) == principal.session_id
                else:
                    assert entry.status is WatcherStatus.PROPOSED
        for watcher_id, entry in outcome.registry:
            if (entry is not None and watcher_id not in before) or (
                entry is not None and entry.version != before[watcher_id][0]
            ):
                owners[watcher_id] = entry.session_id
        live = [e for e in s.view.values() if is_live(e.status)]
        schedules = [e for e in live if is_schedule(e.watcher_id)]
        others = [e for e in live if not is_schedule(e.watcher_id)]
        assert len(schedules) <= limits.schedules
        assert len(others) <= limits.watchers
        assert sum(e.status is WatcherStatus.PROPOSED for e in others) <= limits.proposals
        for session in ("s-1", "s-2"):
            assert sum(e.session_id == session for e in schedules) <= limits.session_schedules
            pending = sum(
                e.session_id == session and e.status is WatcherStatus.PROPOSED for e in others
            )
            assert pending <= limits.session_proposals
            active = sum(
                e.session_id == session and e.status is WatcherStatus.ACTIVE for e in others
            )
            assert active <= 3
        for entry in others:
            if entry.status is WatcherStatus.PROPOSED:
                assert s.now < entry.created_at + limits.proposal_ttl
