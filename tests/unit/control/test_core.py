"""The dispatch core, the control plane's main seam: given a verb, a principal and a chat, what
was stored, delivered, returned or refused. The command processor is the real pure rule
(:func:`pipeline.rules.commands.apply.apply`) over an in-memory registry and outbox; the agent and
scripts are real processes."""

from __future__ import annotations

import stat
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pipeline.clock import ManualClock
from pipeline.control.agent import AgentRunner, AgentTokens
from pipeline.control.client import operator_principal
from pipeline.control.core import Dispatcher, Subjecthood, resolve_chat, user_principal
from pipeline.control.run import ScriptRunner
from pipeline.control.verbs import VerbErrorKind, VerbResponse
from pipeline.rules.authz import Principal, Role
from pipeline.rules.commands import GrantRecord, apply
from pipeline.rules.commands.host import Host
from pipeline.rules.commands.immediate import daemon_grant
from pipeline.rules.commands.model import Command, CommandResult, CommandVerb, RegistryEntry
from pipeline.rules.errors import DefinitionError
from pipeline.rules.keys import derived_delivery_key, request_delivery_key
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.zones import load_zone

pytestmark = pytest.mark.unit

T, U = "local", "me"
HOST = Host.of(T, U, ("me", "ops"))  # the daemon's subject and chats, as the processor knows them
START = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
USER = user_principal(T, U)


class Outbox:
    """What the processor wrote to ``outbox``, in order."""

    def __init__(self) -> None:
        self.entries: list[OutboxEntry] = []


class InMemoryProcessor:
    """The command processor's decisions without Kafka: one subject's registry, grants and the
    outbox entries of immediate sends."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.registry: dict[str, RegistryEntry] = {}
        self.grants: dict[str, GrantRecord] = {}
        self.seen: list[Command] = []
        self.outbox = Outbox()

    def command(
        self, verb: CommandVerb, principal: Principal, tenant_id: str, user_id: str, **fields: Any
    ) -> Command:
        return Command(
            request_id=uuid.uuid4().hex,
            verb=verb,
            principal=principal,
            tenant_id=tenant_id,
            user_id=user_id,
            issued_at=self.clock.now(),
            **fields,
        )

    def send(self, command: Command) -> CommandResult:
        self.seen.append(command)
        outcome = apply(
            command, dict(self.registry), dict(self.grants), self.clock.now(), host=HOST
        )
        for watcher_id, entry in outcome.registry:
            if entry is None:
                self.registry.pop(watcher_id, None)
            else:
                self.registry[watcher_id] = entry
        for grant_id, record in outcome.grants:
            if record is None:
                self.grants.pop(grant_id, None)
            else:
                self.grants[grant_id] = record
        self.outbox.entries.extend(outcome.outbox)
        return outcome.result


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def processor(clock: ManualClock) -> InMemoryProcessor:
    proc = InMemoryProcessor(clock)
    request_id, spec = daemon_grant(T, U, ["me", "ops"])
    command = proc.command(CommandVerb.GRANT_ADD, operator_principal(T, U), T, U, grant=spec)
    assert proc.send(command.model_copy(update={"request_id": request_id})).ok
    return proc


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    allow = tmp_path / "scripts"
    allow.mkdir()
    script = allow / "hello.sh"
    script.write_text('#!/bin/sh\necho "$VIGIL_CHAT_ID" > "$1"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return allow


def _agent_script(tmp_path: Path, body: str) -> list[str]:
    agent = tmp_path / "agent.sh"
    agent.write_text("#!/bin/sh\n" + body)
    agent.chmod(0o700)
    return [str(agent)]


@pytest.fixture
def make(processor: InMemoryProcessor, clock: ManualClock, scripts: Path, tmp_path: Path) -> Any:
    def build(
        agent_body: str = 'read line; echo "answer to: $line"\n',
    ) -> tuple[Dispatcher, Outbox, ScriptRunner]:
        tokens = AgentTokens(T, U)
        socket = tmp_path / "vigil.sock"
        runner = ScriptRunner(scripts, socket)
        agent = AgentRunner(
            _agent_script(tmp_path, agent_body), timedelta(seconds=10), socket, tokens
        )
        who = Subjecthood(T, U, ("me", "ops"), load_zone("Europe/Berlin"))
        dispatcher = Dispatcher(who, commands=processor, agent=agent, runner=runner, clock=clock)
        return dispatcher, processor.outbox, runner

    return build


def _ok(response: VerbResponse) -> dict[str, Any]:
    assert response.ok, response.error
    return response.result or {}


def _schedule(d: Dispatcher, chat: str = "me", **fields: Any) -> VerbResponse:
    return d.handle({"verb": "schedule", "chat": chat, **fields}, USER)


# --- targeting ------------------------------------------------------------------------------


def test_resolve_chat_prefers_the_named_chat_then_the_sole_one() -> None:
    assert resolve_chat("ops", ["me", "ops"]) == "ops"
    assert resolve_chat(None, ["me"]) == "me"


@pytest.mark.parametrize(
    ("requested", "chats", "message"),
    [
        (None, ["me", "ops"], "several chats"),
        (None, [], "no chat is configured"),
        ("nope", ["me"], "no chat 'nope'"),
    ],
)
def test_resolve_chat_refuses_ambiguity_absence_and_unknown_names(
    requested: str | None, chats: list[str], message: str
) -> None:
    with pytest.raises(DefinitionError, match=message):
        resolve_chat(requested, chats)


def test_handle_with_two_chats_and_no_chat_named_is_invalid(make: Any) -> None:
    d, outbox, _ = make()
    response = d.handle({"verb": "send", "text": "hi"}, USER)
    assert response.error is not None and response.error.code is VerbErrorKind.INVALID
    assert response.error.field == "chat"
    assert outbox.entries == []


# --- immediate verbs ------------------------------------------------------------------------


def test_send_is_a_send_command_whose_outbox_entry_is_keyed_by_its_request(
    make: Any, processor: InMemoryProcessor
) -> None:
    d, outbox, _ = make()
    result = _ok(d.handle({"verb": "send", "text": "hi", "chat": "me"}, USER))
    command = processor.seen[-1]
    assert (command.verb, command.target, command.text) == (CommandVerb.SEND, "me", "hi")
    assert command.principal == USER
    [entry] = outbox.entries
    assert (entry.verb, entry.target, entry.text) == ("send", "me", "hi")
    assert (entry.watcher_id, entry.watcher_version, entry.source_id) == ("verb:send", 0, "control")
    assert entry.trigger["request_id"] == command.request_id
    assert entry.delivery_key == request_delivery_key(
        tenant_id=T, user_id=U, verb="send", request_id=command.request_id
    )
    assert result["delivery_key"] == entry.delivery_key


def test_send_without_the_daemon_grant_is_denied_and_writes_nothing(
    make: Any, processor: InMemoryProcessor
) -> None:
    processor.grants.clear()
    d, outbox, _ = make()
    response = d.handle({"verb": "send", "text": "hi", "chat": "me"}, USER)
    assert response.error is not None and response.error.code is VerbErrorKind.DENIED
    assert outbox.entries == []


def test_query_returns_the_agents_answer_and_delivers_nothing(make: Any) -> None:
    d, outbox, _ = make()
    result = _ok(d.handle({"verb": "query", "text": "how?", "chat": "me"}, USER))
    assert result["answer"] == "answer to: how?"
    assert outbox.entries == []


def test_prompt_sends_the_answer_as_a_command_keyed_from_the_prompt(
    make: Any, processor: InMemoryProcessor
) -> None:
    d, outbox, _ = make()
    result = _ok(d.handle({"verb": "prompt", "text": "digest", "chat": "ops"}, USER))
    command = processor.seen[-1]
    assert (command.verb, command.text) == (CommandVerb.SEND, "answer to: digest")
    assert command.answer_to is not None and command.answer_to != command.request_id
    [entry] = outbox.entries
    assert (entry.verb, entry.target, entry.text) == ("send", "ops", "answer to: digest")
    assert entry.trigger["request_id"] == command.answer_to
    prompt_key = request_delivery_key(
        tenant_id=T, user_id=U, verb="prompt", request_id=command.answer_to
    )
    assert entry.delivery_key == derived_delivery_key(prompt_key, "answer")
    assert result["delivery_key"] == entry.delivery_key


def test_prompt_whose_agent_fails_is_unavailable_and_delivers_nothing(make: Any) -> None:
    d, outbox, _ = make("exit 3\n")
    response = d.handle({"verb": "prompt", "text": "x", "chat": "me"}, USER)
    assert response.error is not None and response.error.code is VerbErrorKind.UNAVAILABLE
    assert "status 3" in response.error.message
    assert outbox.entries == []


def test_run_starts_an_allowlisted_script_with_the_chat_in_its_env(
    make: Any, tmp_path: Path
) -> None:
    d, _, runner = make()
    marker = tmp_path / "ran"
    result = _ok(d.handle({"verb": "run", "args": ["hello.sh", str(marker)], "chat": "ops"}, USER))
    runner.wait_all(10)
    assert marker.read_text().strip() == "ops"
    assert result["pid"] > 0


def test_a_fired_schedules_run_asked_by_delivery_carries_its_key_and_schedule(
    make: Any, tmp_path: Path
) -> None:
    """Delivery asks the daemon to start a fired run: the script gets the entry's delivery key
    and the schedule's name and time, and the command processor authorizes it as any run."""
    d, _, runner = make()
    out = tmp_path / "fired"
    script = tmp_path / "scripts" / "fired.sh"
    script.write_text(
        f'#!/bin/sh\necho "$VIGIL_DELIVERY_KEY|$VIGIL_SCHEDULE_NAME|$VIGIL_SCHEDULE_TIME" > {out}\n'
    )
    script.chmod(0o700)
    request = {
        "verb": "run",
        "args": ["fired.sh"],
        "chat": "me",
        "delivery_key": "ab" * 32,
        "schedule_name": "nightly",
        "schedule_time": "2026-12-01T07:00:00Z",
    }
    result = _ok(d.handle(request, USER))
    runner.wait_all(10)
    assert result["delivery_key"] == "ab" * 32
    assert out.read_text().strip() == f"{'ab' * 32}|nightly|2026-12-01T07:00:00Z"
    bad = d.handle({**request, "delivery_key": "not-a-key"}, USER)
    assert bad.error is not None and bad.error.code is VerbErrorKind.INVALID


def test_run_outside_the_allowlist_is_refused(make: Any, tmp_path: Path) -> None:
    d, _, _ = make()
    outside = tmp_path / "evil.sh"
    outside.write_text("#!/bin/sh\n")
    outside.chmod(0o700)
    response = d.handle({"verb": "run", "args": [str(outside)], "chat": "me"}, USER)
    assert response.error is not None and response.error.code is VerbErrorKind.INVALID
    assert "outside the run allowlist" in response.error.message


# --- schedules ------------------------------------------------------------------------------


def test_schedule_in_creates_a_schedule_watcher_frozen_to_its_chat(
    make: Any, processor: InMemoryProcessor
) -> None:
    d, outbox, _ = make()
    result = _ok(_schedule(d, chat="ops", name="hi", argv=["send", "hi"], **{"in": "90s"}))
    assert result["name"] == "hi" and result["chat"] == "ops"
    assert result["next_fire"] == "2026-11-29T12:01:30Z"
    entry = processor.registry["schedule:ops:hi"]
    definition = entry.definition()
    assert definition.source_id == "schedule:ops"
    assert definition.delivery.target == "ops" and definition.delivery.text == "hi"
    assert outbox.entries == []


def test_schedule_without_name_generates_a_handle_and_returns_it(make: Any) -> None:
    d, _, _ = make()
    result = _ok(_schedule(d, argv=["send", "hi"], **{"in": "1h"}))
    assert result["name"].startswith("s") and len(result["name"]) == 7
    listed = _ok(d.handle({"verb": "list", "chat": "me"}, USER))["schedules"]
    assert [e["name"] for e in listed] == [result["name"]]


def test_schedule_name_collision_is_a_conflict_unless_update(
    make: Any, processor: InMemoryProcessor
) -> None:
    d, _, _ = make()
    _ok(_schedule(d, name="n", argv=["send", "one"], **{"in": "1h"}))
    clash = _schedule(d, name="n", argv=["send", "two"], **{"in": "1h"})
    assert clash.error is not None and clash.error.code is VerbErrorKind.CONFLICT
    assert "--update" in clash.error.message
    updated = _ok(_schedule(d, name="n", update=True, argv=["send", "two"], **{"in": "2h"}))
    assert updated["updated"] is True
    assert processor.registry["schedule:me:n"].definition().delivery.text == "two"


def test_schedule_update_of_an_absent_name_creates_it(make: Any) -> None:
    d, _, _ = make()
    result = _ok(_schedule(d, name="fresh", update=True, argv=["send", "x"], **{"in": "1h"}))
    assert result["updated"] is False


def test_same_name_in_two_chats_coexists_and_lists_per_chat(make: Any) -> None:
    d, _, _ = make()
    _ok(_schedule(d, chat="me", name="n", argv=["send", "mine"], **{"in": "1h"}))
    _ok(_schedule(d, chat="ops", name="n", argv=["send", "theirs"], **{"in": "1h"}))
    mine = _ok(d.handle({"verb": "list", "chat": "me"}, USER))["schedules"]
    theirs = _ok(d.handle({"verb": "list", "chat": "ops"}, USER))["schedules"]
    assert [e["argv"] for e in mine] == [["send", "mine"]]
    assert [e["argv"] for e in theirs] == [["send", "theirs"]]


def test_list_json_entries_have_the_documented_fields(make: Any, clock: ManualClock) -> None:
    d, _, _ = make()
    _ok(_schedule(d, name="digest", argv=["prompt", "digest"], cron="0 8 * * *"))
    [entry] = _ok(d.handle({"verb": "list", "chat": "me"}, USER))["schedules"]
    assert set(entry) == {"name", "chat", "schedule", "argv", "created_at", "next_fire"}
    assert entry["schedule"] == {"cron": "0 8 * * *", "timezone": "Europe/Berlin"}
    # 08:00 in Berlin (UTC+1 in winter) is 07:00Z, the next morning after 12:00Z.
    assert entry["next_fire"] == "2026-11-30T07:00:00Z"


def test_at_is_read_in_the_subjects_zone(make: Any) -> None:
    d, _, _ = make()
    result = _ok(_schedule(d, name="a", argv=["send", "x"], at="2026-12-01T08:00"))
    assert result["schedule"] == {"at": "2026-12-01T07:00:00Z"}


def test_at_in_the_past_is_refused(make: Any) -> None:
    d, _, _ = make()
    response = _schedule(d, name="a", argv=["send", "x"], at="2026-11-29T08:00")
    assert response.error is not None and response.error.field == "at"


def test_scheduled_run_of_a_script_outside_the_allowlist_is_refused_at_creation(
    make: Any, processor: InMemoryProcessor
) -> None:
    d, _, _ = make()
    response = _schedule(d, name="r", argv=["run", "/bin/true"], **{"in": "1h"})
    assert response.error is not None and response.error.code is VerbErrorKind.INVALID
    assert processor.registry == {}


def test_cancel_removes_a_schedule_from_list_and_unknown_name_is_not_found(make: Any) -> None:
    d, _, _ = make()
    _ok(_schedule(d, name="n", argv=["send", "x"], **{"in": "1h"}))
    _ok(d.handle({"verb": "cancel", "name": "n", "chat": "me"}, USER))
    assert _ok(d.handle({"verb": "list", "chat": "me"}, USER))["schedules"] == []
    again = d.handle({"verb": "cancel", "name": "n", "chat": "me"}, USER)
    assert again.error is not None and again.error.code is VerbErrorKind.NOT_FOUND
    unknown = d.handle({"verb": "cancel", "name": "never", "chat": "me"}, USER)
    assert unknown.error is not None and unknown.error.code is VerbErrorKind.NOT_FOUND


def test_a_cancelled_name_can_be_scheduled_again_as_a_new_version(
    make: Any, processor: InMemoryProcessor
) -> None:
    d, _, _ = make()
    _ok(_schedule(d, name="n", argv=["send", "x"], **{"in": "1h"}))
    _ok(d.handle({"verb": "cancel", "name": "n", "chat": "me"}, USER))
    _ok(_schedule(d, name="n", argv=["send", "y"], **{"in": "1h"}))
    assert processor.registry["schedule:me:n"].version == 2


def test_schedule_without_the_daemon_grant_is_denied(
    make: Any, processor: InMemoryProcessor
) -> None:
    processor.grants.clear()
    d, _, _ = make()
    response = _schedule(d, name="n", argv=["send", "x"], **{"in": "1h"})
    assert response.error is not None and response.error.code is VerbErrorKind.DENIED


# --- agents ---------------------------------------------------------------------------------


def _agent(session: str = "agent-run-1") -> Principal:
    return Principal(
        name=f"agent:{session}", role=Role.AGENT, tenant_id=T, user_id=U, session_id=session
    )


def test_agent_may_schedule_list_and_cancel_its_own_but_not_query_run_or_schedule_run(
    make: Any,
) -> None:
    d, _, _ = make()
    agent = _agent()
    _ok(
        d.handle(
            {"verb": "schedule", "chat": "me", "in": "1h", "name": "mine", "argv": ["send", "x"]},
            agent,
        )
    )
    _ok(
        d.handle(
            {"verb": "schedule", "chat": "me", "in": "1h", "name": "users", "argv": ["send", "u"]},
            USER,
        )
    )
    listed = _ok(d.handle({"verb": "list", "chat": "me"}, agent))
    assert [e["name"] for e in listed["schedules"]] == ["mine"]
    for body in (
        {"verb": "query", "text": "x", "chat": "me"},
        {"verb": "run", "args": ["hello.sh"], "chat": "me"},
        {"verb": "prompt", "text": "x", "chat": "me"},
        {"verb": "schedule", "chat": "me", "in": "1h", "argv": ["run", "hello.sh"]},
    ):
        response = d.handle(body, agent)
        assert response.error is not None and response.error.code is VerbErrorKind.DENIED, body
    users = d.handle({"verb": "cancel", "name": "users", "chat": "me"}, agent)
    assert users.error is not None and users.error.code is VerbErrorKind.NOT_FOUND
    replaced = d.handle(
        {
            "verb": "schedule",
            "chat": "me",
            "in": "2h",
            "name": "users",
            "update": True,
            "argv": ["send", "hijacked"],
        },
        agent,
    )
    assert replaced.error is not None and replaced.error.code is VerbErrorKind.DENIED
    _ok(d.handle({"verb": "cancel", "name": "mine", "chat": "me"}, agent))
    assert [
        e["name"] for e in _ok(d.handle({"verb": "list", "chat": "me"}, USER))["schedules"]
    ] == ["users"]
    assert _ok(d.handle({"verb": "list", "chat": "me"}, USER))["schedules"][0]["argv"] == [
        "send",
        "u",
    ]


def test_agent_schedule_and_send_carry_the_agent_as_their_principal(
    make: Any, processor: InMemoryProcessor
) -> None:
    d, outbox, _ = make()
    agent = _agent()
    _ok(d.handle({"verb": "schedule", "chat": "me", "in": "1h", "argv": ["send", "x"]}, agent))
    last = processor.seen[-1]
    assert (last.verb, last.principal) == (CommandVerb.SCHEDULE, agent)
    [entry] = processor.registry.values()
    assert entry.session_id == agent.session_id
    _ok(
        d.handle(
            {
                "verb": "schedule",
                "chat": "me",
                "name": "n",
                "update": True,
                "in": "1h",
                "argv": ["send", "y"],
            },
            agent,
        )
    )
    last = processor.seen[-1]
    assert (last.verb, last.principal) == (CommandVerb.SCHEDULE_UPDATE, agent)
    _ok(d.handle({"verb": "send", "chat": "me", "text": "now"}, agent))
    assert processor.seen[-1].principal == agent
    assert [e.text for e in outbox.entries] == ["now"]


def test_agent_run_sees_socket_chat_and_a_token_that_dies_with_the_run(
    make: Any, tmp_path: Path
) -> None:
    body = 'echo "$VIGIL_SOCKET|$VIGIL_CHAT_ID|$VIGIL_AGENT_TOKEN"\n'
    tokens = AgentTokens(T, U)
    runner = AgentRunner(
        _agent_script(tmp_path, body), timedelta(seconds=10), tmp_path / "s.sock", tokens
    )
    socket, chat, token = runner.ask("hi", "ops").split("|")
    assert (socket, chat) == (str(tmp_path / "s.sock"), "ops")
    assert len(token) >= 24
    assert tokens.by_token(token) is None  # revoked once the run ended
