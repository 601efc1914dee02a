"""Who a socket peer is: real agent runs (real processes, real ``/proc``) and what they fork.

A double-forked child of an agent run — reparented away from the agent, without its token — is
still that run's agent, during the run and after it ended; a process under ``[agent] run_as``'s
uid is an agent whatever it did; a stale token is refused; anyone else is the user.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from pipeline.control.agent import AgentRun, AgentRunner, AgentTokens
from pipeline.control.core import user_principal
from pipeline.control.identity import PeerIdentity
from pipeline.control.isolation import process_chain, process_info
from pipeline.control.socket.server import Peer
from pipeline.rules.authz import Role
from pipeline.rules.errors import VigilError

pytestmark = pytest.mark.unit

USER = user_principal("t", "u")


def _wait_for(path: Path, timeout_s: float = 10) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def _agent(tmp_path: Path, body: str) -> tuple[AgentRunner, AgentTokens]:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o700)
    tokens = AgentTokens("t", "u")
    runner = AgentRunner([str(script)], timedelta(seconds=20), tmp_path / "s.sock", tokens)
    return runner, tokens


def test_a_double_forked_child_without_its_token_is_still_the_agent_during_and_after_the_run(
    tmp_path: Path,
) -> None:
    child_pid = tmp_path / "child.pid"
    seen = tmp_path / "seen"
    # The agent double-forks a child that drops the token, then waits until the test has
    # looked at it once (during the run) before the agent answers and ends.
    body = (
        "( unset VIGIL_AGENT_TOKEN; sleep 60 </dev/null >/dev/null 2>&1 &\n"
        f"  echo $! > {child_pid} ) &\n"
        f'while [ ! -e "{seen}" ]; do sleep 0.05; done\n'
        "echo done\n"
    )
    runner, tokens = _agent(tmp_path, body)
    identity = PeerIdentity(USER, tokens)
    answers: list[str] = []
    asking = threading.Thread(target=lambda: answers.append(runner.ask("x", "me")))
    asking.start()
    pid = int(_wait_for(child_pid))
    try:
        info = process_info(pid)
        assert info is not None
        assert os.getpid() not in [p.pid for p in process_chain(pid)]
        during = identity.of(Peer.at_connect(pid=pid, uid=os.getuid()), None)
        seen.write_text("1")
        asking.join(20)
        assert answers == ["done"]
        after = identity.of(Peer.at_connect(pid=pid, uid=os.getuid()), None)
        assert during is not None and during.role is Role.AGENT
        assert after == during  # the ended run's agent, same session
        assert identity.of(Peer.at_connect(pid=os.getpid(), uid=os.getuid()), None) == USER
    finally:
        os.kill(pid, 9)


def test_a_token_no_live_run_holds_is_refused_never_the_user(tmp_path: Path) -> None:
    tokens = AgentTokens("t", "u")
    identity = PeerIdentity(USER, tokens)
    run = tokens.issue("me")
    me = Peer.at_connect(pid=os.getpid(), uid=os.getuid())
    assert identity.of(me, run.token) == run.principal
    tokens.revoke(run)
    assert identity.of(me, run.token) is None
    assert identity.of(me, "forged") is None


def test_a_peer_under_the_agent_uid_is_an_agent_whatever_it_forked() -> None:
    tokens = AgentTokens("t", "u")
    identity = PeerIdentity(USER, tokens, agent_uid=4242)
    stray = identity.of(Peer.at_connect(pid=os.getpid(), uid=4242), None)
    assert stray is not None and stray.role is Role.AGENT
    assert stray.session_id == "agent-uid-4242"
    assert identity.of(Peer.at_connect(pid=os.getpid(), uid=os.getuid()), None) == USER


def test_a_peer_whose_process_is_gone_or_replaced_is_refused_with_or_without_a_token() -> None:
    """DESIGN.md §10: socket identity is fail-closed. A peer whose pid is gone (its ancestry
    unreadable) or names another process now (another start time) is nobody, never the user."""
    tokens = AgentTokens("t", "u")
    identity = PeerIdentity(USER, tokens)
    run = tokens.issue("me")
    gone = subprocess.Popen(["/bin/true"])
    connected = Peer.at_connect(pid=gone.pid, uid=os.getuid())
    gone.wait()
    assert connected.start is not None and not connected.unchanged()
    assert identity.of(connected, None) is None
    assert identity.of(connected, run.token) is None
    me = Peer.at_connect(pid=os.getpid(), uid=os.getuid())
    assert me.unchanged() and identity.of(me, None) == USER
    assert me.start is not None
    replaced = Peer(pid=os.getpid(), uid=os.getuid(), start=me.start - 1)
    assert identity.of(replaced, None) is None
    assert identity.of(Peer(pid=os.getpid(), uid=os.getuid(), start=None), None) is None


class _Watched(AgentTokens):
    """Tokens whose ``attach`` first gives the agent a moment to run: a command that ran before
    its run held its pid would have forked already."""

    def __init__(self, forked: Path) -> None:
        super().__init__("t", "u")
        self._forked = forked
        self.ran_before_attach: bool | None = None

    def attach(self, run: AgentRun, pid: int) -> AgentRun:
        deadline = time.monotonic() + 2
        while not self._forked.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.ran_before_attach = self._forked.exists()
        return super().attach(run, pid)


def test_the_agent_command_runs_only_once_its_run_holds_its_pid(tmp_path: Path) -> None:
    # Else a tokenless child it forks at once could reach the socket before the daemon knew
    # the run, and be taken for the user (it was, once, in a loaded CI run).
    child_pid = tmp_path / "child.pid"
    script = tmp_path / "agent.sh"
    script.write_text(
        "#!/bin/sh\n"
        "( unset VIGIL_AGENT_TOKEN; sleep 60 </dev/null >/dev/null 2>&1 &\n"
        f"  echo $! > {child_pid} ) &\n"
        "cat\n"
    )
    script.chmod(0o700)
    tokens = _Watched(child_pid)
    runner = AgentRunner([str(script)], timedelta(seconds=20), tmp_path / "s.sock", tokens)

    answer = runner.ask("the prompt, whole\nand its second line", "me")

    pid = int(_wait_for(child_pid))
    try:
        assert tokens.ran_before_attach is False
        assert answer == "the prompt, whole\nand its second line"  # the gate took only its line
        seen = PeerIdentity(USER, tokens).of(Peer.at_connect(pid=pid, uid=os.getuid()), None)
        assert seen is not None and seen.role is Role.AGENT
    finally:
        os.kill(pid, 9)


def test_an_agent_command_that_cannot_start_says_so(tmp_path: Path) -> None:
    runner = AgentRunner(
        [str(tmp_path / "missing")],
        timedelta(seconds=20),
        tmp_path / "s.sock",
        AgentTokens("t", "u"),
    )
    with pytest.raises(VigilError, match="cannot start the agent 'missing': not found"):
        runner.ask("x", "me")
