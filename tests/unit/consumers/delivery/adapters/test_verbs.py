"""Fired ``prompt`` and ``run`` entries where delivery runs: a two-step prompt, a started run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from consumers.delivery.adapters.verbs import SocketRunner, VerbExecutor
from pipeline.clock import ManualClock
from pipeline.control.agent import AgentRunner, AgentTokens
from pipeline.control.run import ScriptRunner
from pipeline.control.socket.server import Peer, SocketServer
from pipeline.control.verbs import VerbErrorKind, VerbResponse
from pipeline.kafka.serde import default_codec
from pipeline.records.outbox_entry import decode_outbox_entry
from pipeline.rules.commands.host import Host
from pipeline.rules.commands.immediate import immediate_entry
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.errors import DefinitionError, VigilError
from pipeline.rules.keys import derived_delivery_key
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import ErrorCode
from tests.keyring import ring_with

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 1, 7, 0, 5, tzinfo=UTC)
RING = ring_with(subject_owner("t", "u"))
HOST = Host.of("t", "u", ["me"])


def _fired(verb: str, **fields: Any) -> OutboxEntry:
    base = immediate_entry(
        tenant_id="t", user_id="u", verb="send", request_id="r1", chat="me", now=NOW, text="x"
    )
    update: dict[str, Any] = {
        "watcher_id": "schedule:me:digest",
        "watcher_version": 1,
        "source_id": "schedule:me",
        "trigger": {"kind": "schedule", "scheduled_at": "2026-12-01T07:00:00Z"},
        "verb": verb,
        "late": True,
        "schedule_name": "digest",
        "schedule_time": NOW - timedelta(seconds=5),
        **fields,
    }
    return base._replace(**update)


def _executor(tmp_path: Path, agent_body: str) -> tuple[VerbExecutor, ScriptRunner]:
    agent = tmp_path / "agent.sh"
    agent.write_text("#!/bin/sh\n" + agent_body)
    agent.chmod(0o700)
    allow = tmp_path / "scripts"
    allow.mkdir(exist_ok=True)
    socket = tmp_path / "v.sock"
    runner = ScriptRunner(allow, socket)
    agents = AgentRunner([str(agent)], timedelta(seconds=10), socket, AgentTokens("t", "u"))
    executor = VerbExecutor(
        agents, runner, "p.outbox", sealer=RING, host=HOST, clock=ManualClock(NOW)
    )
    return executor, runner


def test_fired_prompt_returns_its_answer_as_a_derived_send_entry(tmp_path: Path) -> None:
    executor, _ = _executor(tmp_path, 'read l; echo "digest for $l"\n')
    entry = _fired("prompt", text="today")
    result = executor.execute(entry)
    assert result.ok
    [record] = result.records
    assert record.topic == "p.outbox"
    assert b"digest for today" not in record.value, "the answer travels sealed"
    answer = decode_outbox_entry(default_codec(), RING, record.value)
    assert answer.delivery_key == derived_delivery_key(entry.delivery_key, "answer")
    assert record.key == answer.delivery_key.encode()
    assert (answer.verb, answer.text, answer.target) == ("send", "digest for today", "me")
    assert answer.late and answer.watcher_id == "schedule:me:digest"


def test_fired_prompt_whose_agent_fails_is_unavailable_and_writes_nothing(tmp_path: Path) -> None:
    executor, _ = _executor(tmp_path, "exit 1\n")
    result = executor.execute(_fired("prompt", text="today"))
    assert result.error is ErrorCode.UNAVAILABLE and result.records == ()


def test_fired_run_starts_the_script_with_its_schedule_context(tmp_path: Path) -> None:
    executor, runner = _executor(tmp_path, "true\n")
    out = tmp_path / "out.txt"
    script = tmp_path / "scripts" / "job.sh"
    script.write_text(f'#!/bin/sh\necho "$VIGIL_SCHEDULE_NAME|$VIGIL_SCHEDULE_TIME" > {out}\n')
    script.chmod(0o700)
    result = executor.execute(_fired("run", text=None, args=("job.sh",)))
    runner.wait_all(10)
    assert result.ok
    assert out.read_text().strip() == "digest|2026-12-01T07:00:00Z"


def test_fired_run_outside_the_allowlist_is_rejected(tmp_path: Path) -> None:
    executor, _ = _executor(tmp_path, "true\n")
    result = executor.execute(_fired("run", text=None, args=("/bin/true",)))
    assert result.error is ErrorCode.REJECTED


@pytest.mark.parametrize(
    "change",
    [
        {"tenant_id": "other"},
        {"user_id": "someone"},
        {"purpose": "ops.alert"},
        {"target": "elsewhere"},
    ],
)
def test_a_fired_entry_not_the_daemons_is_rejected_and_never_executed(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    """DESIGN.md §10: delivery asks the host's rule again, whatever reached the outbox."""
    marker = tmp_path / "ran.txt"
    executor, runner = _executor(tmp_path, f"touch {marker}; echo answer\n")
    script = tmp_path / "scripts" / "job.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o700)
    for entry in (_fired("prompt", text="hi"), _fired("run", text=None, args=("job.sh",))):
        result = executor.execute(entry._replace(**change))
        assert result.error is ErrorCode.REJECTED and result.records == ()
    runner.wait_all(5)
    assert not marker.exists()


def test_the_socket_runner_asks_the_daemon_with_the_entrys_key_and_schedule(
    tmp_path: Path,
) -> None:
    asked: list[object] = []

    def handler(body: object, peer: Peer) -> VerbResponse:
        asked.append(body)
        if isinstance(body, dict) and body["args"][0] == "gone.sh":
            return VerbResponse.failure(VerbErrorKind.INVALID, "no script 'gone.sh'", "args")
        if isinstance(body, dict) and body["args"][0] == "later.sh":
            return VerbResponse.failure(VerbErrorKind.UNAVAILABLE, "the broker is away")
        return VerbResponse.success(script="/s/job.sh", pid=42)

    with SocketServer(tmp_path / "d" / "v.sock", handler) as server:
        runner = SocketRunner(server.path)
        started = runner.start(
            ["job.sh", "a"],
            chat="me",
            delivery_key="ab" * 32,
            schedule_name="digest",
            schedule_time=NOW,
        )
        assert (str(started.script), started.pid) == ("/s/job.sh", 42)
        assert asked[0] == {
            "verb": "run",
            "args": ["job.sh", "a"],
            "chat": "me",
            "delivery_key": "ab" * 32,
            "schedule_name": "digest",
            "schedule_time": "2026-12-01T07:00:05Z",
        }
        with pytest.raises(DefinitionError):
            runner.start(["gone.sh"], chat="me", delivery_key="ab" * 32)
        with pytest.raises(VigilError) as unavailable:
            runner.start(["later.sh"], chat="me", delivery_key="ab" * 32)
        assert not isinstance(unavailable.value, DefinitionError)
