"""The agent: a fresh process per call, answer on stdout, a timeout, a per-run token."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest

from pipeline.control.agent import MAX_ANSWER, AgentRunner, AgentTokens
from pipeline.control.isolation import process_chain
from pipeline.rules.errors import ConfigError, VigilError

pytestmark = pytest.mark.unit


def _runner(tmp_path: Path, body: str, timeout_s: float = 10) -> tuple[AgentRunner, AgentTokens]:
    agent = tmp_path / "agent.sh"
    agent.write_text("#!/bin/sh\n" + body)
    agent.chmod(0o700)
    tokens = AgentTokens("t", "u")
    runner = AgentRunner([str(agent)], timedelta(seconds=timeout_s), tmp_path / "s.sock", tokens)
    return runner, tokens


def test_agent_reads_the_prompt_on_stdin_and_answers_on_stdout(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, "cat | tr a-z A-Z\n")
    assert runner.ask("hello agent", "me") == "HELLO AGENT"


def test_each_call_is_a_fresh_process(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, "echo $$\n")
    assert runner.ask("a", "me") != runner.ask("b", "me")


def test_agent_that_outlives_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    runner, _ = _runner(tmp_path, f"sleep 30 & echo $! > {marker}\nwait\n", timeout_s=2.0)
    with pytest.raises(VigilError, match="did not answer within"):
        runner.ask("x", "me")
    child = int(marker.read_text())
    # The whole process group was signalled: the child is gone (or a zombie being reaped). On
    # a busy machine it may still be running its way to the signal: poll for a while.
    deadline = time.monotonic() + 10
    state = _state(child)
    while state not in {"gone", "Z"} and time.monotonic() < deadline:
        time.sleep(0.05)
        state = _state(child)
    assert state in {"gone", "Z"}


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_agent_with_no_answer_or_a_failure_is_an_error(tmp_path: Path) -> None:
    silent, _ = _runner(tmp_path, "true\n")
    with pytest.raises(VigilError, match="answered nothing"):
        silent.ask("x", "me")
    failing, _ = _runner(tmp_path, "echo partial; exit 2\n")
    with pytest.raises(VigilError, match="status 2"):
        failing.ask("x", "me")


def test_no_agent_configured_is_a_config_error(tmp_path: Path) -> None:
    runner = AgentRunner(None, timedelta(seconds=1), tmp_path / "s", AgentTokens("t", "u"))
    with pytest.raises(ConfigError, match=r"\[agent\] command"):
        runner.ask("x", "me")


def test_runs_in_one_chat_share_its_conversation_and_other_chats_do_not(tmp_path: Path) -> None:
    tokens = AgentTokens("t", "u")
    first, second, elsewhere = tokens.issue("me"), tokens.issue("me"), tokens.issue("ops")
    assert first.principal.role.value == "agent"
    assert first.token != second.token
    assert first.principal.session_id == second.principal.session_id == "conversation:me"
    assert elsewhere.principal.session_id == "conversation:ops"
    assert tokens.by_token(first.token) == first
    tokens.revoke(first)
    assert tokens.by_token(first.token) is None
    assert tokens.by_token("forged") is None


def test_a_run_is_found_by_its_process_or_an_ancestor_and_not_by_a_stranger(
    tmp_path: Path,
) -> None:
    tokens = AgentTokens("t", "u")
    run = tokens.issue("me")
    tokens.attach(run, os.getppid())
    found = tokens.by_process(process_chain(os.getpid()))
    assert found is not None and found.token == run.token
    with subprocess.Popen(["sleep", "30"], start_new_session=True) as stranger:
        try:
            other = AgentTokens("t", "u")
            other.attach(other.issue("me"), stranger.pid)
            assert other.by_process(process_chain(os.getpid())) is None
        finally:
            stranger.kill()


def test_the_agent_sees_only_the_allowlisted_environment(tmp_path: Path) -> None:
    agent = tmp_path / "env.sh"
    agent.write_text("#!/bin/sh\nenv | sort\n")
    agent.chmod(0o700)
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": "/home/me",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "OPS_HOOK_SECRET": "s3cret",
        "TELEGRAM_BOT_TOKEN": "123:abc",
        "VIGIL_CONFIG": "/etc/vigil.toml",
        "MY_AGENT_KEY": "k",
    }
    runner = AgentRunner(
        [str(agent)],
        timedelta(seconds=10),
        tmp_path / "s.sock",
        AgentTokens("t", "u"),
        environ=environ,
        pass_env=("MY_AGENT_KEY",),
    )
    names = {line.split("=", 1)[0] for line in runner.ask("x", "me").splitlines()}
    assert names - {"PWD", "SHLVL", "_", "OLDPWD"} == {
        "PATH",
        "HOME",
        "LANG",
        "TZ",
        "MY_AGENT_KEY",
        "VIGIL_SOCKET",
        "VIGIL_CHAT_ID",
        "VIGIL_AGENT_TOKEN",
        "VIGIL_SESSION_ID",
    }


def test_an_agent_that_talks_past_the_cap_answers_with_a_marker_and_is_not_killed(
    tmp_path: Path,
) -> None:
    done = tmp_path / "done"
    agent = tmp_path / "agent.sh"
    agent.write_text(
        "#!/bin/sh\nhead -c 3000000 /dev/zero | tr '\\0' a\n"
        "head -c 3000000 /dev/zero | tr '\\0' e >&2\n"
        f"touch {done}\n"
    )
    agent.chmod(0o700)
    runner = AgentRunner(
        [str(agent)],
        timedelta(seconds=30),
        tmp_path / "s.sock",
        AgentTokens("t", "u"),
        max_output=8192,
    )
    answer = runner.ask("x", "me")
    marker = "\n[agent output truncated at 8192 bytes]"
    assert answer.endswith(marker)
    assert len(answer) == MAX_ANSWER and set(answer[: -len(marker)]) == {"a"}
    assert done.exists()  # it ran to its end
