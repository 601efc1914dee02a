"""Hostile commands meet the command processor's decision (DESIGN.md §10 "Hostile input").

A hypothesis property over more than 10,000 generated and mutated definitions and commands, each
taken through what the command processor does with a record it decoded: read the command
(:func:`~pipeline.records.command.command_from_value`), then decide it
(:func:`~pipeline.rules.commands.apply`) against the subject's registry so far. The property:
nothing raises; every command is accepted or refused with a reason code; every definition
that was accepted survives the ticker's and delivery's planning at ``now`` and ``now ± 100 y``;
a ``redeliver`` is accepted only from the subject, a manager or an operator with a
well-formed delivery key (agents, scoped chats, the system, strangers and malformed keys are
refused), asking delivery for exactly that key of that subject; and a watcher that delivers with
``run`` or ``prompt`` is accepted only for the daemon's own subject, under the control purpose,
for one of its chats (DESIGN.md §10 "The host's powers stay with the host"), whichever daemon
the processor serves — another tenant's, or none.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.records.command import command_from_value
from pipeline.rules.authz import Action, Grant, Role
from pipeline.rules.budgets import (
    BudgetCaps,
    BudgetCeilings,
    BudgetVerdict,
    resolve_caps,
    window_end,
)
from pipeline.rules.commands import (
    Command,
    CommandOutcome,
    CommandVerb,
    GrantRecord,
    Redelivery,
    RegistryEntry,
    ResultCode,
    apply,
    refused,
)
from pipeline.rules.commands.host import NO_HOST, Host
from pipeline.rules.commands.immediate import CONTROL_PURPOSE
from pipeline.rules.definition import DeliveryVerb, WatcherDefinition
from pipeline.rules.dispatch import (
    DeliveryState,
    DispatchAction,
    DispatchPlan,
    claim,
    fail,
    pending,
    plan_attempt,
    purge_due,
    succeed,
)
from pipeline.rules.errors import DefinitionError
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.outbox import OutboxEntry, build_entry
from pipeline.rules.outcomes import ErrorCode
from pipeline.rules.sources import EventSource, PollingSource
from pipeline.rules.ticker import plan_watcher
from tests.keyring import OpenRing, sealed_command_value

pytestmark = pytest.mark.unit

_HEX_KEY = re.compile(r"[0-9a-f]{64}")
RING = OpenRing()  # seals a command value's content under a key made for its subject

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CENTURY = timedelta(days=36_525)
TENANT, USER = "acme", "u-42"
EXAMPLES = 2_600
PER_EXAMPLE = 4
DEFAULTS = BudgetCaps(window=timedelta(hours=1), deliveries=100, attempts=1_000)
CEILINGS = BudgetCeilings(deliveries=10_000, attempts=100_000)


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"all": [value]}
    return value


# --- valid starting points: one per kind of watcher and schedule -------------------------

TEMPLATES: list[dict[str, Any]] = [
    {
        "watcher_id": "release-build-failed",
        "purpose": "ops.alert",
        "source": {
            "kind": "event",
            "source_id": "ci.pipeline",
            "event_type": "build.finished",
            "max_age": "10m",
        },
        "condition": {"all": [{"eq": ["status", "failed"]}, {"exists": "commit.sha"}]},
        "delivery": {
            "target": "ops-hook",
            "quiet_hours": {"start": "22:00", "end": "07:00", "timezone": "Europe/Berlin"},
        },
        "expires_at": "2027-06-01T00:00:00Z",
        "budgets": {"window": "1h", "deliveries": 20, "attempts": 200},
        "retry": {"max_attempts": 8, "base": "5s", "cap": "1h"},
        "privacy": {"retain_paths": ["status"], "delivery_retention": "30d"},
    },
    {
        "watcher_id": "status-down",
        "purpose": "ops.alert",
        "source": {
            "kind": "polling",
            "source_id": "status.page",
            "tool": "http.json@v1",
            "tool_ref": "status-page",
            "cron": "*/5 * * * *",
            "timezone": "America/New_York",
            "missed": {"bounded": 3},
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "down"]},
        "delivery": {"target": "ops-hook"},
        "expires_at": "2030-01-01T00:00:00Z",
        "privacy": {"delivery_retention": "30d"},
    },
    {
        "watcher_id": "run-watch",
        "purpose": "agent.watch",
        "mode": "once",
        "source": {
            "kind": "polling",
            "source_id": "run:r-1",
            "tool": "workflow.run.status@v1",
            "target": "r-1",
            "cadence": "5m",
            "max_age": "2m",
        },
        "condition": {"eq": ["status", "succeeded"]},
        "terminal_condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "in-app", "wake_session": True},
        "window": "1h",
        "session_id": "s-1",
    },
    {
        "watcher_id": "schedule:me:stretch",
        "purpose": "ops.alert",
        "source": {"kind": "schedule", "at": "2026-12-01T08:00:00Z"},
        "delivery": {"target": "me", "verb": "send", "text": "stand up"},
    },
    {
        "watcher_id": "schedule:me:daily",
        "purpose": "ops.alert",
        "source": {"kind": "schedule", "cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"},
        "delivery": {"target": "me", "verb": "run", "args": ["report.sh", "--daily"]},
    },
    {
        "watcher_id": "schedule:me:report",
        "purpose": CONTROL_PURPOSE,
        "source": {"kind": "schedule", "cron": "0 9 * * *", "timezone": "UTC"},
        "delivery": {"target": "me", "verb": "run", "args": ["report.sh"]},
    },
    {
        "watcher_id": "schedule:me:ask",
        "purpose": CONTROL_PURPOSE,
        "source": {"kind": "schedule", "at": "2026-12-01T08:00:00Z"},
        "delivery": {"target": "me", "verb": "prompt", "text": "how is it going?"},
    },
]
# The daemon the processor serves: this subject's, another tenant's, or none at all.
HOSTS = [Host.of(TENANT, USER, ["me"]), Host.of("evil", "x", ["me"]), NO_HOST]
HOST_VERBS = frozenset({DeliveryVerb.RUN, DeliveryVerb.PROMPT})

HOSTILE: list[Any] = [
    "",
    " ",
    "a" * 300,
    "a:" * 50_000,
    "x" * 1_000_000,
    "99999999999d",
    "800000d",
    "3654d",
    "3653d",
    "0s",
    "-5m",
    "1" * 20_000 + "s",
    "0001-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "9999-12-31T23:59:59.999999Z",
    "9999-12-31T23:59:59-01:00",
    "2026-02-30T00:00:00Z",
    "https://evil.example/hook",
    "user:pw@host",
    "ghp_" + "a" * 30,
    "Bearer abc",
    "* * * * *",
    "0 0 31 2 *",
    "0 0 29 2 *",
    "61 * * * *",
    "Mars/Olympus",
    "../../etc/passwd",
    "schedule:me:x",
    "run:r-1",
    "\ud800",
    "\x00",
    2**63,
    -(2**63),
    2**64,
    10**30,
    -1,
    0,
    1,
    101,
    1e308,
    -0.0,
    float("nan"),
    float("inf"),
    True,
    None,
    [],
    {},
    [1, "a", None],
    {"bounded": 101},
    {"bounded": 0},
    nested(70),
    nested(9),
]


_DURATIONS = ["99999999999d", "800000d", "3654d", "3653d", "0s", "-5m", "1" * 20_000 + "s", "1s"]
_INSTANTS = [
    "0001-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "1970-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999Z",
    "9999-12-31T23:59:59-01:00",
    "2026-02-30T00:00:00Z",
]
_REFS = ["a" * 1_000_000, "a:" * 50_000, "https://evil.example/x", "user:pw@host", "", "me"]
FIELD_HOSTILITY: dict[str, list[Any]] = {
    **{
        name: _DURATIONS
        for name in (
            "max_age",
            "window",
            "evidence_retention",
            "delivery_retention",
            "base",
            "cap",
            "cadence",
        )
    },
    **{name: _INSTANTS for name in ("expires_at", "at", "until")},
    **{name: _REFS for name in ("target", "source_id", "tool_ref", "session_id", "watcher_id")},
    "cron": ["* * * * *", "0 0 31 2 *", "0 0 29 2 *", "61 * * * *", "*/1 " * 200],
    "timezone": ["Mars/Olympus", "../../etc/passwd", "UTC", "Pacific/Kiritimati", "x" * 10_000],
    "missed": [{"bounded": 101}, {"bounded": 0}, {"bounded": 100}, "skip", "all"],
    "max_attempts": [0, 1, 100, 101, 2**63],
    "deliveries": [2**53, 2**53 - 1, 10**30, -1, 20_000],
    "attempts": [2**53, 200_000, -1],
    "condition": [nested(9), nested(70), {"eq": ["a" * 5_000, 1]}, {"all": []}],
    "start": ["24:00", "00:00", "23:59"],
}


def all_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key and index path inside ``value`` (containers included)."""
    found: list[tuple[Any, ...]] = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(all_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found.extend(all_paths(child, (*prefix, index)))
    return found


def mutated(data: st.DataObject, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with up to three mutations: a value replaced, a key removed or one added."""
    body = copy.deepcopy(body)
    for _ in range(data.draw(st.sampled_from([0, 0, 0, 0, 1, 1, 2, 3]), label="mutations")):
        paths = all_paths(body)
        path = data.draw(st.sampled_from(paths), label="path")
        parent: Any = body
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        op = data.draw(st.sampled_from(["set", "set", "delete", "add", "text", "int"]))
        if op == "delete" and isinstance(parent, dict):
            parent.pop(last, None)
        elif op == "add" and isinstance(parent, dict):
            parent[data.draw(st.sampled_from(["extra", "version", "tenant_id", "mode"]))] = (
                copy.deepcopy(data.draw(st.sampled_from(HOSTILE)))
            )
        elif op == "text":
            parent[last] = data.draw(st.text(max_size=40))
        elif op == "int":
            parent[last] = data.draw(st.one_of(st.integers(-100, 1000), st.integers()))
        else:
            pool = FIELD_HOSTILITY.get(str(last), HOSTILE)
            if data.draw(st.integers(0, 3)) == 0:
                pool = HOSTILE
            parent[last] = copy.deepcopy(data.draw(st.sampled_from(pool)))
    return body


def definition_text(data: st.DataObject, body: dict[str, Any]) -> str:
    """The definition as a producer might have written it: JSON (NaN allowed), or worse."""
    text = json.dumps(body, allow_nan=True)
    how = data.draw(st.sampled_from(["json"] * 12 + ["cut", "deep", "junk"]))
    if how == "cut":
        return text[: data.draw(st.integers(0, len(text)))]
    if how == "deep":
        return "[" * 100_000 + "]" * 100_000
    if how == "junk":
        return data.draw(st.text(max_size=60))
    return text


VERBS = [
    *["create"] * 16,
    *["update"] * 3,
    *["propose"] * 6,
    *["schedule"] * 4,
    "schedule_update",
    "approve",
    "approve",
    "pause",
    "resume",
    "cancel",
    "close",
    "erase",
    "show",
    "list",
    "grant_add",
    "grant_revoke",
    "grant_list",
    "send",
    *["redeliver"] * 3,
    "fly",
]
_DEFINING = ("create", "update", "propose", "schedule", "schedule_update")
PRINCIPALS: list[dict[str, Any]] = [
    {"name": "owner", "role": "user", "tenant_id": TENANT, "user_id": USER, "session_id": None},
    {"name": "boss", "role": "manager", "tenant_id": TENANT, "user_id": "m-1", "session_id": None},
    {"name": "agent", "role": "agent", "tenant_id": TENANT, "user_id": USER, "session_id": "s-1"},
    {
        "name": "chat",
        "role": "scoped_chat",
        "tenant_id": TENANT,
        "user_id": USER,
        "session_id": "s-1",
    },
    {"name": "op", "role": "operator", "tenant_id": "ops", "user_id": "root", "session_id": None},
    {"name": "evaluator", "role": "system", "tenant_id": "-", "user_id": "-", "session_id": None},
    {"name": "other", "role": "user", "tenant_id": "evil", "user_id": "x", "session_id": None},
    {"name": "odd", "role": "wizard", "tenant_id": TENANT, "user_id": USER, "session_id": None},
]
GOOD_KEY = "ab" * 32
DELIVERY_KEYS: list[Any] = [
    *[GOOD_KEY] * 6,
    None,
    "",
    "AB" * 32,
    "ab" * 31 + "a",
    "ab" * 32 + "a",
    "a" * 1_000_000,
    "zz" * 32,
    "ab" * 31 + "\n" + "a",
    12,
]
# Who may ask for a redelivery (DESIGN.md §9): the subject itself, a manager of its tenant, an
# operator. Never an agent or a scoped chat, nor the system or a stranger.
REDELIVERERS = frozenset({Role.USER, Role.MANAGER, Role.OPERATOR})
INSTANTS = [
    NOW,
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(1970, 1, 1, tzinfo=UTC),
]


def grant(purpose: str, grant_id: str) -> GrantRecord:
    return GrantRecord(
        Grant(
            grant_id=grant_id,
            tenant_id=TENANT,
            user_id=USER,
            purpose=purpose,
            sources=frozenset({"ci.pipeline", "status.page", "run:r-1", "schedule:me"}),
            tools=frozenset({"status-page", "workflow.run.status@v1"}),
            targets=frozenset({"ops-hook", "in-app", "me"}),
            actions=frozenset(Action),
            until=NOW + timedelta(days=365),
        ),
        NOW,
        "op",
    )


GRANTS = {
    "g-1": grant("ops.alert", "g-1"),
    "g-2": grant("agent.watch", "g-2"),
    "g-3": grant(CONTROL_PURPOSE, "g-3"),
}


ENVELOPE_HOSTILITY: dict[str, list[Any]] = {
    "request_id": ["", "r " * 200, "a" * 129],
    "tenant_id": ["evil", "", "a" * 300],
    "user_id": ["x", ""],
    "issued_at": INSTANTS[1:],
    "version": [0, -1, 2**63 - 1],
    "expected_revision": [-5, 2**63 - 1, 0, 1],
    "reason": ["satisfied", "expired", "cancelled", "zzz"],
    "state": ["active", "proposed", "zzz"],
    "answer_to": ["r-1", "bad id!"],
    "session_id": ["s-2", "a" * 500],
    "target": ["me", "https://evil/x"],
    "text": ["", "x" * 100_000],
    "source_id": ["a" * 500],
}


@st.composite
def command_values(draw: st.DrawFn, known_ids: list[str]) -> dict[str, Any]:
    """A decoded ``command`` record as a producer, honest or hostile, may have written it:
    an honest envelope with at most one field made hostile, and a definition mutated at up to
    three places (or as text, cut or made of brackets)."""
    data = draw(st.data())
    verb = draw(st.sampled_from(VERBS))
    weighted = [PRINCIPALS[0]] * 7 + [PRINCIPALS[2]] * 2 + PRINCIPALS
    # A redelivery's oracle is about who asks: every role equally often.
    principal = dict(draw(st.sampled_from(PRINCIPALS if verb == "redeliver" else weighted)))
    if draw(st.integers(0, 7)) == 0:
        principal[draw(st.sampled_from(list(principal)))] = draw(
            st.sampled_from(["", "a" * 500, "s-2", TENANT, USER, None])
        )
    template = dict(draw(st.sampled_from(TEMPLATES)))
    if verb == "create" and str(template["watcher_id"]).startswith("schedule:"):
        verb = "schedule"  # schedules are created by their own verb (DESIGN.md §10)
    n = draw(st.integers(0, 9))
    base = str(template["watcher_id"])
    template["watcher_id"] = f"{base}{n}" if base.startswith("schedule:") else f"{base}-{n}"
    body = mutated(data, template)
    grant_spec = {
        "tenant_id": TENANT,
        "user_id": USER,
        "purpose": "ops.alert",
        "sources": ["ci.pipeline"],
        "actions": ["manage"],
        "until": "2027-01-01T00:00:00Z",
    }
    value: dict[str, Any] = {
        "request_id": f"r-{draw(st.integers(0, 5))}",
        "verb": verb,
        "principal": principal,
        "tenant_id": TENANT,
        "user_id": USER,
        "issued_at": NOW,
        "watcher_id": (
            draw(st.sampled_from([None, body.get("watcher_id")]))
            if verb in _DEFINING
            else draw(st.sampled_from([*known_ids, "w-x", None]))
        ),
        "version": None,
        "expected_revision": draw(st.sampled_from([None, 1, 2])) if verb == "update" else None,
        "definition": definition_text(data, body) if verb in _DEFINING else None,
        "reason": "satisfied" if verb == "close" else None,
        "grant": json.dumps(mutated(data, grant_spec)) if verb == "grant_add" else None,
        "grant_id": draw(st.sampled_from([None, "g-1", "g-2", "g-x"])),
        "source_id": None,
        "state": None,
        "session_id": None,
        "target": "me" if verb == "send" else None,
        "text": "hello" if verb == "send" else None,
        "answer_to": None,
    }
    if verb == "redeliver":
        value["delivery_key"] = draw(st.sampled_from(DELIVERY_KEYS))
    if draw(st.integers(0, 2)) == 0:
        name = draw(st.sampled_from(sorted(ENVELOPE_HOSTILITY)))
        value[name] = draw(st.sampled_from(ENVELOPE_HOSTILITY[name]))
    return value


# --- what the accepted definitions must survive ------------------------------------------


def evidence_for(definition: WatcherDefinition, now: datetime) -> Evidence:
    source = definition.source
    if isinstance(source, EventSource):
        return Evidence(
            EvidenceKind.EVENT,
            definition.source_id,
            now,
            event_type=source.event_type,
            event_id="e-1",
        )
    kind = EvidenceKind.POLL if isinstance(source, PollingSource) else EvidenceKind.SCHEDULE
    return Evidence(
        kind,
        definition.source_id,
        now,
        scheduled_at=now,
        watcher_key=definition.watcher_key,
    )


def attempt(
    outbox: OutboxEntry, caps: BudgetCaps, state: DeliveryState, at: datetime
) -> DispatchPlan:
    """Delivery's pre-dispatch plan of ``state`` at ``at``, everything else allowed."""
    return plan_attempt(
        state,
        now=at,
        authorized=True,
        quiet_hours=outbox.quiet_hours,
        attempt_budget=BudgetVerdict.OK,
        closed=False,
        window_end=window_end(at, caps.window),
    )


def survives_planning(entry: RegistryEntry) -> None:
    """The ticker's plan (fresh and from its own memory) and a whole delivery, at each now."""
    definition = entry.definition()
    for now in (NOW, NOW + CENTURY, NOW - CENTURY):
        first = plan_watcher(definition, entry.status, entry.activated_at, None, now)
        plan_watcher(definition, entry.status, entry.activated_at, first.memory, now + CENTURY)
        plan_watcher(definition, entry.status, entry.activated_at, first.memory, now + timedelta(1))
        outbox = build_entry(definition, evidence_for(definition, now), "0" * 64, now)
        caps = resolve_caps(outbox.budgets, DEFAULTS, CEILINGS)
        plan = attempt(outbox, caps, pending(outbox.delivery_key, outbox.due_at, now), now)
        if plan.action is DispatchAction.DEFER:  # quiet hours: the next allowed minute
            plan = attempt(outbox, caps, plan.state, plan.state.due_at)
        assert plan.action is DispatchAction.DISPATCH
        retried = fail(plan.state, ErrorCode.TIMEOUT, now, policy=outbox.retry)
        if retried.status.value == "pending":
            retried = claim(retried, retried.due_at)
        if retried.status.value == "dead_letter":  # retry.max_attempts 1: the ceiling at once
            done = retried
        else:
            done = succeed(retried, retried.updated_at)
        purge_due(done, outbox.delivery_retention)


class Processor:
    """One subject's registry as the command processor keeps it, fed decoded command values."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.host_verbs: dict[bool, int] = {True: 0, False: 0}  # accepted / refused
        self.view: dict[str, RegistryEntry] = {}
        self.grants = dict(GRANTS)
        self.decided = 0
        self.accepted_definitions = 0
        self.refused = 0
        self.redelivered: set[Role] = set()  # who had a redelivery accepted
        self.refused_redeliveries: set[Role | str] = set()  # who was refused; "key": malformed

    def decide(self, value: dict[str, Any]) -> None:
        self.decided += 1
        try:
            command = command_from_value(sealed_command_value(RING, value), RING)
        except DefinitionError as exc:  # the consumer's edge: an ``invalid`` result
            result = refused(str(value["request_id"]), str(value["verb"]), exc, NOW)
            assert result.error is not None and result.error.code is ResultCode.INVALID
            self.refused += 1
            if value["verb"] == "redeliver" and value.get("delivery_key") != GOOD_KEY:
                self.refused_redeliveries.add("key")
            return
        outcome = apply(command, self.view, self.grants, NOW, ceilings=CEILINGS, host=self.host)
        self.check(outcome)
        self.check_host(command, outcome)
        self.check_redelivery(command, outcome)

    def check_redelivery(self, command: Command, outcome: CommandOutcome) -> None:
        """The ``redeliver`` oracle: only the subject, a manager or an operator, only a
        well-formed key (a malformed one never gets past :func:`command_from_value`), and
        exactly one request for the subject; no other verb asks for one."""
        if command.verb is not CommandVerb.REDELIVER:
            assert outcome.redeliveries == ()
            return
        role = command.principal.role
        if role not in REDELIVERERS:
            assert not outcome.result.ok, (role, outcome.result)
            self.refused_redeliveries.add(role)
        if not outcome.result.ok:
            assert outcome.redeliveries == ()
            return
        assert command.delivery_key is not None and _HEX_KEY.fullmatch(command.delivery_key)
        assert role in REDELIVERERS
        if role is Role.USER:
            assert (command.principal.tenant_id, command.principal.user_id) == (TENANT, USER)
        assert outcome.redeliveries == (
            Redelivery(command.delivery_key, TENANT, USER, command.request_id, NOW),
        )
        self.redelivered.add(role)

    def check_host(self, command: Command, outcome: CommandOutcome) -> None:
        """The host oracle: an accepted ``run``/``prompt`` is the daemon subject's, under the
        control purpose, for one of its chats; counted on both sides."""
        delivery = (command.definition or {}).get("delivery")
        asked = isinstance(delivery, dict) and delivery.get("verb") in ("run", "prompt")
        for entry in outcome.definitions:
            definition = entry.definition()
            if definition.delivery.verb not in HOST_VERBS:
                continue
            host = self.host
            assert (entry.tenant_id, entry.user_id) == (host.tenant_id, host.user_id), entry
            assert definition.purpose == CONTROL_PURPOSE, entry
            assert definition.delivery.target in host.chats, entry
        if asked:
            self.host_verbs[bool(outcome.definitions) and outcome.result.ok] += 1

    def check(self, outcome: CommandOutcome) -> None:
        result = outcome.result
        if result.ok:
            assert result.error is None and result.result is not None
        else:
            self.refused += 1
            assert result.error is not None and result.error.code in set(ResultCode)
            assert result.error.message
            assert not (outcome.registry or outcome.watchers or outcome.grants or outcome.outbox)
        for watcher_id, entry in outcome.registry:
            if entry is None:
                self.view.pop(watcher_id, None)
                continue
            self.view[watcher_id] = entry
            if entry in outcome.definitions:
                self.accepted_definitions += 1
            survives_planning(entry)
        for grant_id, record in outcome.grants:
            if record is None:
                self.grants.pop(grant_id, None)
            else:
                self.grants[grant_id] = record


@pytest.mark.slow
def test_hostile_commands_never_raise_are_decided_with_a_reason_and_plan_for_two_centuries() -> (
    None
):
    totals = {"commands": 0, "accepted": 0, "refused": 0}
    redelivered: set[Role] = set()
    refused_redeliveries: set[Role | str] = set()
    host_verbs = {True: 0, False: 0}
    known = [
        f"{t['watcher_id']}{n}"
        if str(t["watcher_id"]).startswith("schedule:")
        else f"{t['watcher_id']}-{n}"
        for t in TEMPLATES
        for n in range(3)
    ]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,  # the same 10,400 commands on every run: the counts below are stable
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        st.lists(command_values(known), min_size=PER_EXAMPLE, max_size=PER_EXAMPLE),
        st.sampled_from(HOSTS),
    )
    def run(values: list[dict[str, Any]], host: Host) -> None:
        processor = Processor(host)
        for value in values:
            processor.decide(value)
        totals["commands"] += processor.decided
        totals["accepted"] += processor.accepted_definitions
        totals["refused"] += processor.refused
        redelivered.update(processor.redelivered)
        refused_redeliveries.update(processor.refused_redeliveries)
        for accepted, count in processor.host_verbs.items():
            host_verbs[accepted] += count

    run()
    assert totals["commands"] >= 10_000
    # The generator reaches both sides of the rules: many accepted, many refused.
    # (1,093 accepted and 9,048 refused here; the margin keeps a generator that shifts a little
    # under a busy machine's health checks from failing a run that still reaches both sides.)
    assert totals["accepted"] >= 500 and totals["refused"] >= 500, totals
    assert redelivered == REDELIVERERS  # each allowed role was accepted at least once
    assert {Role.AGENT, Role.SCOPED_CHAT, "key"} <= refused_redeliveries  # and refusals reached
    assert host_verbs[True] >= 10 and host_verbs[False] >= 10, host_verbs  # run/prompt, both sides
    print("host verbs accepted/refused:", host_verbs[True], host_verbs[False])


def test_reproduced_failures_are_refusals_with_their_field() -> None:
    """The inputs issue 14 reproduced, each now a refusal naming what is wrong."""
    cases: list[tuple[Callable[[dict[str, Any]], None], str]] = [
        (lambda b: b["source"].__setitem__("max_age", "99999999999d"), "source.max_age"),
        (lambda b: b.__setitem__("expires_at", "0001-01-01T00:00:00Z"), "expires_at"),
        (
            lambda b: b.__setitem__("privacy", {"delivery_retention": "800000d"}),
            "privacy.delivery_retention",
        ),
        (lambda b: b["delivery"].__setitem__("target", "a" * 1_000_000), "delivery.target"),
    ]
    for change, field in cases:
        body = copy.deepcopy(TEMPLATES[0])
        change(body)
        outcome = created(body)
        assert outcome.result.error is not None, field
        assert (outcome.result.error.code, outcome.result.error.field) == (
            ResultCode.INVALID,
            field,
        )


def test_a_watcher_allowed_one_attempt_survives_planning() -> None:
    """``retry.max_attempts`` 1: the first failure is the ceiling (dead letter, never a success
    after it). The generator above reaches it only when a busy machine shifts its draws."""
    body = copy.deepcopy(TEMPLATES[0])
    body["retry"] = {"max_attempts": 1}
    outcome = created(body)
    assert outcome.result.ok, outcome.result.error
    [(_, entry)] = outcome.registry
    assert entry is not None and entry.definition().retry.max_attempts == 1
    survives_planning(entry)


def created(body: dict[str, Any]) -> CommandOutcome:
    """What the command processor makes of one ``create`` of ``body`` by the first principal."""
    value = {
        "request_id": "r-1",
        "verb": "create",
        "principal": PRINCIPALS[0],
        "tenant_id": TENANT,
        "user_id": USER,
        "issued_at": NOW,
        "definition": json.dumps(body),
    }
    command = command_from_value(sealed_command_value(RING, value), RING)
    return apply(command, {}, GRANTS, NOW, host=HOSTS[0])
