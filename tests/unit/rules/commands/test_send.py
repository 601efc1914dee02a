"""The command processor's immediate ``send`` and the role verbs of schedules and answers: what
the pure :func:`pipeline.rules.commands.apply.apply` decides and which outbox entry it yields."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest

from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.records.command import (
    command_from_value,
    command_value,
    decode_command,
    encode_command,
)
from pipeline.rules.authz import Action, Grant, Principal, Role, Verb
from pipeline.rules.commands import (
    SEND_TEXT_MAX,
    Command,
    CommandOutcome,
    CommandVerb,
    GrantRecord,
    RegistryEntry,
    ResultCode,
    apply,
    watcher_view,
)
from pipeline.rules.commands.context import role_verb
from pipeline.rules.commands.host import NO_HOST, Host
from pipeline.rules.commands.immediate import daemon_grant
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.keys import derived_delivery_key, request_delivery_key
from pipeline.rules.outcomes import Outcome
from tests.keyring import ring_with

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
T, U = "local", "me"
_ids = itertools.count()

OWNER = Principal(name="daemon:local/me", role=Role.USER, tenant_id=T, user_id=U)
AGENT = Principal(name="agent:r-1", role=Role.AGENT, tenant_id=T, user_id=U, session_id="r-1")
OPERATOR = Principal(name="op", role=Role.OPERATOR, tenant_id="ops", user_id="root")


def control_grants(*chats: str, **changes: Any) -> dict[str, GrantRecord]:
    """The daemon's grant over ``chats`` (default ``me``), optionally altered."""
    _, spec = daemon_grant(T, U, chats or ("me",))
    grant = Grant(
        grant_id="g-control",
        tenant_id=T,
        user_id=U,
        purpose=spec.purpose,
        sources=frozenset(spec.sources),
        targets=frozenset(spec.targets),
        actions=frozenset(spec.actions),
        until=spec.until,
    )
    return {"g-control": GrantRecord(grant.model_copy(update=changes), NOW, "op")}


def command(verb: CommandVerb, principal: Principal = OWNER, **fields: Any) -> Command:
    return Command(
        request_id=f"r-{next(_ids)}",
        verb=verb,
        principal=principal,
        tenant_id=T,
        user_id=U,
        issued_at=NOW,
        **fields,
    )


HOST = Host.of(T, U, ["me"])


def decide(
    cmd: Command,
    grants: dict[str, GrantRecord] | None = None,
    view: dict[str, RegistryEntry] | None = None,
    host: Host = HOST,
) -> CommandOutcome:
    grants = control_grants() if grants is None else grants
    return apply(cmd, view or {}, grants, NOW, host=host)


def refusal(outcome: CommandOutcome) -> tuple[ResultCode, str | None]:
    error = outcome.result.error
    assert error is not None, outcome.result
    assert not (outcome.outbox or outcome.registry or outcome.watchers or outcome.lifecycle)
    return error.code, error.field


def schedule(name: str = "n", chat: str = "me", text: str = "hi") -> dict[str, Any]:
    return {
        "watcher_id": f"schedule:{chat}:{name}",
        "purpose": "control.chat",
        "source": {"kind": "schedule", "at": "2026-11-29T13:00:00Z"},
        "delivery": {"target": chat, "verb": "send", "text": text},
    }


# --- send -----------------------------------------------------------------------------------


def test_send_yields_one_outbox_entry_keyed_by_the_request_delivery_key() -> None:
    cmd = command(CommandVerb.SEND, target="me", text="deploy finished")
    outcome = decide(cmd)
    [entry] = outcome.outbox
    key = request_delivery_key(tenant_id=T, user_id=U, verb="send", request_id=cmd.request_id)
    assert entry.delivery_key == key
    assert (entry.verb, entry.target, entry.text, entry.outcome) == (
        "send",
        "me",
        "deploy finished",
        Outcome.SATISFIED,
    )
    assert (entry.watcher_id, entry.source_id, entry.purpose) == (
        "verb:send",
        "control",
        "control.chat",
    )
    assert (entry.due_at, entry.created_at) == (NOW, NOW)
    assert outcome.result.result == {
        "delivery_key": key,
        "target": "me",
        "request_id": cmd.request_id,
    }
    assert not (outcome.registry or outcome.watchers or outcome.lifecycle or outcome.grants)


def test_a_retried_send_command_yields_the_same_key() -> None:
    cmd = command(CommandVerb.SEND, target="me", text="x")
    assert decide(cmd).outbox[0].delivery_key == decide(cmd).outbox[0].delivery_key


def test_an_answer_is_keyed_from_its_prompt_and_two_answers_of_one_prompt_collide() -> None:
    first = decide(command(CommandVerb.SEND, target="me", text="one", answer_to="p-1"))
    again = decide(command(CommandVerb.SEND, target="me", text="two", answer_to="p-1"))
    prompt_key = request_delivery_key(tenant_id=T, user_id=U, verb="prompt", request_id="p-1")
    assert first.outbox[0].delivery_key == derived_delivery_key(prompt_key, "answer")
    assert again.outbox[0].delivery_key == first.outbox[0].delivery_key
    assert first.outbox[0].trigger == {"kind": "request", "request_id": "p-1"}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"text": "x"}, "target"),
        ({"target": "me"}, "text"),
        ({"target": "me", "text": ""}, "text"),
        ({"target": "me", "text": "x" * (SEND_TEXT_MAX + 1)}, "text"),
    ],
    ids=["no-chat", "no-text", "empty-text", "too-long"],
)
def test_send_without_a_chat_or_text_is_invalid_naming_the_field(
    fields: dict[str, Any], field: str
) -> None:
    assert refusal(decide(command(CommandVerb.SEND, **fields))) == (ResultCode.INVALID, field)


@pytest.mark.parametrize(
    "grants",
    [
        {},
        control_grants("ops"),
        control_grants(actions=frozenset({Action.EVALUATE, Action.MANAGE})),
        control_grants(purpose="ops.alert"),
        control_grants(sources=frozenset({"schedule:me"})),
        control_grants(until=NOW),
    ],
    ids=["no-grant", "other-chat", "no-deliver", "purpose", "no-control-source", "expired"],
)
def test_send_without_a_grant_covering_the_chat_is_denied(
    grants: dict[str, GrantRecord],
) -> None:
    outcome = decide(command(CommandVerb.SEND, target="me", text="x"), grants)
    assert refusal(outcome)[0] is ResultCode.DENIED


def test_an_agent_may_send_but_not_answer_a_prompt_and_a_stranger_may_do_neither() -> None:
    assert decide(command(CommandVerb.SEND, AGENT, target="me", text="x")).result.ok
    answer = decide(command(CommandVerb.SEND, AGENT, target="me", text="x", answer_to="p-1"))
    assert refusal(answer)[0] is ResultCode.DENIED
    stranger = Principal(name="x", role=Role.USER, tenant_id=T, user_id="u-7")
    assert refusal(decide(command(CommandVerb.SEND, stranger, target="me", text="x")))[0] is (
        ResultCode.DENIED
    )


def test_a_send_command_round_trips_through_its_avro_schema_and_v1_records_still_read() -> None:
    codec = default_codec()
    ring = ring_with(subject_owner(T, U))
    cmd = command(CommandVerb.SEND, target="me", text="hé-secret", answer_to="p-1")
    raw = encode_command(codec, ring, cmd)
    assert "hé-secret".encode() not in raw, "the text travels sealed"
    assert decode_command(codec, ring, raw) == cmd
    v1 = AvroCodec.from_documents({"command.v1.avsc": _v1_document()})
    listed = command(CommandVerb.LIST)
    record = {
        k: v
        for k, v in command_value(listed, ring).items()
        if k not in ("target", "text", "answer_to", "sealed", "delivery_key", "offset", "limit")
    }
    _, old = codec.decode(v1.encode("command", record))
    assert command_from_value(old, ring) == listed


def _v1_document() -> dict[str, Any]:
    import json
    from importlib import resources

    text = resources.files("schemas").joinpath("command.v1.avsc").read_text(encoding="utf-8")
    document: dict[str, Any] = json.loads(text)
    return document


# --- role verbs: schedules are the control plane's commands, answers need prompt -------------


def test_role_verb_of_create_and_update_is_create_whatever_the_id() -> None:
    assert role_verb(command(CommandVerb.CREATE, definition=schedule())) is Verb.CREATE
    assert role_verb(command(CommandVerb.UPDATE, watcher_id="schedule:me:n")) is Verb.CREATE
    assert role_verb(command(CommandVerb.SCHEDULE, definition=schedule())) is Verb.SCHEDULE
    assert role_verb(command(CommandVerb.SCHEDULE_UPDATE)) is Verb.SCHEDULE
    assert role_verb(command(CommandVerb.SEND, answer_to="p")) is Verb.PROMPT
    assert role_verb(command(CommandVerb.SEND)) is Verb.SEND


def test_an_agent_schedules_and_upserts_its_own_schedule_in_its_session() -> None:
    created = decide(
        command(CommandVerb.SCHEDULE, AGENT, watcher_id="schedule:me:n", definition=schedule())
    )
    assert created.result.ok, created.result.error
    [entry] = created.definitions
    assert (entry.watcher_id, entry.status.value, entry.session_id) == (
        "schedule:me:n",
        "active",
        "r-1",
    )
    view = {entry.watcher_id: entry}
    upsert = command(CommandVerb.SCHEDULE_UPDATE, AGENT, definition=schedule(text="again"))
    updated = decide(upsert, view=view)
    assert updated.result.ok, updated.result.error
    assert updated.definitions[0].version == 2
    clash = decide(command(CommandVerb.SCHEDULE, AGENT, definition=schedule()), view=view)
    assert refusal(clash) == (ResultCode.CONFLICT, "watcher_id")


def test_an_agent_may_not_create_or_update_any_watcher_schedule_ids_included() -> None:
    for verb in (CommandVerb.CREATE, CommandVerb.UPDATE):
        for body in (schedule(), {**schedule(), "watcher_id": "plain"}):
            outcome = decide(command(verb, AGENT, definition=body, expected_revision=1))
            assert refusal(outcome)[0] is ResultCode.DENIED, (verb, body["watcher_id"])


def test_an_agent_may_not_schedule_run() -> None:
    run = {**schedule(), "delivery": {"target": "me", "verb": "run", "args": ["/bin/sh"]}}
    for verb in (CommandVerb.SCHEDULE, CommandVerb.SCHEDULE_UPDATE):
        assert refusal(decide(command(verb, AGENT, definition=run)))[0] is ResultCode.DENIED
    assert decide(command(CommandVerb.SCHEDULE, OWNER, definition=run)).result.ok


@pytest.mark.parametrize("verb", ["run", "prompt"])
def test_run_and_prompt_are_the_daemon_subjects_alone_over_any_edge(verb: str) -> None:
    """DESIGN.md §10 "The host's powers stay with the host": another tenant (or user) with a
    grant of its own, another purpose, another chat, or a processor told of no daemon: refused
    at create, update, schedule and import; the daemon's subject for its chat: accepted."""
    act = {"verb": "run", "args": ["ok.sh"]} if verb == "run" else {"verb": verb, "text": "hi"}
    body = {**schedule(), "delivery": {"target": "me", **act}}
    scheduled = decide(command(CommandVerb.SCHEDULE, OWNER, definition=body))
    assert scheduled.result.ok
    exported = watcher_view(scheduled.definitions[0])  # as export writes it, for import
    other_tenant = Host.of("other", U, ["me"])
    other_user = Host.of(T, "someone", ["me"])
    for host in (other_tenant, other_user, Host.of(T, U, ["elsewhere"]), NO_HOST):
        for cmd_verb in (CommandVerb.SCHEDULE, CommandVerb.SCHEDULE_UPDATE, CommandVerb.CREATE):
            outcome = decide(command(cmd_verb, OWNER, definition=body), host=host)
            assert refusal(outcome) == (ResultCode.DENIED, "delivery.verb"), (host, cmd_verb)
        authorized = decide(command(CommandVerb.RUN, OWNER, target="me"), host=host)
        assert refusal(authorized) == (ResultCode.DENIED, "verb")
        imported = decide(command(CommandVerb.IMPORT, OPERATOR, definition=exported), host=host)
        assert refusal(imported) == (ResultCode.DENIED, "delivery.verb"), host
    assert decide(command(CommandVerb.IMPORT, OPERATOR, definition=exported)).result.ok
    grants = control_grants()
    [record] = grants.values()
    wider = record.grant.model_copy(update={"purpose": "ops.alert", "grant_id": "g-ops"})
    grants["g-ops"] = GrantRecord(wider, NOW, "op")
    other_purpose = {**body, "purpose": "ops.alert"}
    outcome = decide(command(CommandVerb.SCHEDULE, OWNER, definition=other_purpose), grants)
    assert refusal(outcome) == (ResultCode.DENIED, "delivery.verb")
    sends = {**other_purpose, "delivery": {"target": "me", "verb": "send", "text": "hi"}}
    assert decide(command(CommandVerb.SCHEDULE, OWNER, definition=sends), grants).result.ok


def test_an_agent_never_replaces_or_cancels_a_schedule_it_did_not_create() -> None:
    entry = decide(command(CommandVerb.SCHEDULE, OWNER, definition=schedule())).definitions[0]
    view = {entry.watcher_id: entry}
    upsert = command(CommandVerb.SCHEDULE_UPDATE, AGENT, definition=schedule(text="hijack"))
    assert refusal(decide(upsert, view=view)) == (ResultCode.DENIED, "name")
    other = Principal(name="a2", role=Role.AGENT, tenant_id=T, user_id=U, session_id="r-2")
    theirs = decide(command(CommandVerb.SCHEDULE, other, definition=schedule("o"))).definitions[0]
    view[theirs.watcher_id] = theirs
    for watcher_id in (entry.watcher_id, theirs.watcher_id):
        cancel = command(CommandVerb.CANCEL, AGENT, watcher_id=watcher_id)
        assert refusal(decide(cancel, view=view)) == (ResultCode.NOT_FOUND, "watcher_id")
    mine = decide(command(CommandVerb.SCHEDULE, AGENT, definition=schedule("m"))).definitions[0]
    view[mine.watcher_id] = mine
    cancelled = decide(command(CommandVerb.CANCEL, AGENT, watcher_id=mine.watcher_id), view=view)
    assert cancelled.result.ok, cancelled.result.error
    # The user owns everything of theirs, the agent's schedules included.
    assert decide(upsert.model_copy(update={"principal": OWNER}), view=view).result.ok
    listed = decide(command(CommandVerb.LIST, AGENT), view=view).result.result
    assert listed is not None
    assert [w["watcher_id"] for w in listed["watchers"]] == ["schedule:me:m"]


def test_a_schedule_command_holds_its_definition_to_a_schedule() -> None:
    event_source = {
        **schedule(),
        "source": {"kind": "event", "source_id": "ci", "event_type": "x", "max_age": "1m"},
        "condition": {"eq": ["a", 1]},
        "delivery": {"target": "me"},
        "expires_at": "2027-01-01T00:00:00Z",
    }
    named_other = command(
        CommandVerb.SCHEDULE,
        AGENT,
        watcher_id="schedule:me:n",
        definition={**event_source, "watcher_id": "plain"},
    )
    assert refusal(decide(named_other)) == (ResultCode.INVALID, "watcher_id")
    outcome = decide(command(CommandVerb.SCHEDULE, AGENT, definition=event_source))
    assert refusal(outcome) == (ResultCode.INVALID, "source")
    plain = decide(
        command(CommandVerb.SCHEDULE, OWNER, definition={**event_source, "watcher_id": "w"})
    )
    assert refusal(plain) == (ResultCode.INVALID, "watcher_id")


def test_an_agents_schedule_without_the_manage_grant_is_denied() -> None:
    grants = control_grants(actions=frozenset({Action.EVALUATE, Action.DELIVER}))
    outcome = decide(command(CommandVerb.SCHEDULE, AGENT, definition=schedule()), grants)
    assert refusal(outcome)[0] is ResultCode.DENIED


# --- the daemon's own verbs: run, query, a prompt's agent step ------------------------------


@pytest.mark.parametrize("verb", [CommandVerb.RUN, CommandVerb.QUERY, CommandVerb.PROMPT])
def test_the_daemons_verbs_need_its_grant_and_write_nothing(verb: CommandVerb) -> None:
    allowed = decide(command(verb, target="me"))
    assert allowed.result.ok, allowed.result.error
    assert allowed.result.result == {"verb": verb.value, "target": "me", "grant_id": "g-control"}
    assert not (allowed.outbox or allowed.registry or allowed.watchers or allowed.lifecycle)
    assert refusal(decide(command(verb, target="me"), grants={}))[0] is ResultCode.DENIED
    assert refusal(decide(command(verb, target="elsewhere")))[0] is ResultCode.DENIED
    assert refusal(decide(command(verb))) == (ResultCode.INVALID, "target")
    assert refusal(decide(command(verb, AGENT, target="me")))[0] is ResultCode.DENIED
