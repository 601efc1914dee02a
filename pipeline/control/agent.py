"""The agent behind ``prompt`` and ``query``: one fresh process per call, and its agent token.

Owns :class:`AgentRunner` (seed 001's ephemeral session: prompt on stdin, bounded answer on stdout,
a timeout that kills the process group; never inside a Kafka transaction), :class:`AgentTokens` and
:func:`conversation_session`. Left out: what the agent is (any command reading stdin), delivering
the answer (``dispatch``, the delivery consumer) and deciding a socket peer's principal
(``identity``)."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Final

from pipeline.control.capture import communicate
from pipeline.control.isolation import (
    AgentUser,
    ProcessInfo,
    allowlisted_env,
    clean_start,
    process_info,
)
from pipeline.control.skill import ENV_SKILL
from pipeline.rules.authz import Principal, Role
from pipeline.rules.errors import ConfigError, VigilError

__all__ = [
    "ENV_AGENT_TOKEN",
    "ENV_CHAT_ID",
    "ENV_SESSION_ID",
    "ENV_SOCKET",
    "MAX_ANSWER",
    "MAX_OUTPUT",
    "AgentRun",
    "AgentRunner",
    "AgentTokens",
    "agent_principal",
    "conversation_session",
]

log = logging.getLogger(__name__)

ENV_SOCKET: Final = "VIGIL_SOCKET"
ENV_CHAT_ID: Final = "VIGIL_CHAT_ID"
ENV_AGENT_TOKEN: Final = "VIGIL_AGENT_TOKEN"
ENV_SESSION_ID: Final = "VIGIL_SESSION_ID"
MAX_ANSWER: Final = 4096  # one chat message
MAX_OUTPUT: Final = 1 << 20  # bytes of an agent's stdout (and of its stderr) the daemon keeps
_KILL_GRACE_S: Final = 2.0
_ENDED_KEPT: Final = 1024  # ended runs remembered, so what they leave behind stays the agent
# Wait for the daemon's word (a line on stdin), then become the command: same pid and session.
_GATE: Final = ("/bin/sh", "-c", 'read -r _ || exit 125; exec "$@"', "vigil-agent")


def conversation_session(chat: str) -> str:
    """The session of the daemon subject's conversation in ``chat``: the same for every agent
    run in that chat, so caps, ``--update``, ``list`` and ``cancel`` hold across its turns."""
    return f"conversation:{chat}"


def agent_principal(
    tenant_id: str, user_id: str, session_id: str, *, name: str = "agent"
) -> Principal:
    """An agent of ``(tenant_id, user_id)`` acting in ``session_id``."""
    return Principal(
        name=f"{name}:{session_id}",
        role=Role.AGENT,
        tenant_id=tenant_id,
        user_id=user_id,
        session_id=session_id,
    )


@dataclass(frozen=True, slots=True)
class AgentRun:
    """One agent process: who it acts as, for which chat; ``pid`` and ``start`` (its start in
    clock ticks after boot) once started — the pid is its process group and session too."""

    token: str
    principal: Principal
    chat: str
    pid: int | None = None
    start: int | None = None

    def holds(self, chain: Sequence[ProcessInfo]) -> bool:
        """Whether a process of ``chain`` (a peer and its ancestors) is this run's process or
        its descendant, even one that double-forked away from it (same group or session)."""
        if self.pid is None:
            return False
        if not any(self.pid in (info.pid, info.group, info.session) for info in chain):
            return False
        leader = process_info(self.pid)  # a pid number is reused only once its session is gone
        return leader is None or leader.start == self.start


class AgentTokens:
    """Per-run agent tokens, valid while their run lasts; ended runs are remembered (the last
    :data:`_ENDED_KEPT`) so that a process a run left behind is still that run's agent.
    Thread-safe."""

    def __init__(self, tenant_id: str, user_id: str) -> None:
        self._tenant_id = tenant_id
        self._user_id = user_id
        self._runs: dict[str, AgentRun] = {}
        self._ended: OrderedDict[str, AgentRun] = OrderedDict()
        self._lock = threading.Lock()

    def issue(self, chat: str) -> AgentRun:
        token = secrets.token_urlsafe(24)
        principal = agent_principal(self._tenant_id, self._user_id, conversation_session(chat))
        run = AgentRun(token, principal, chat)
        with self._lock:
            self._runs[token] = run
        return run

    def stray(self, uid: int) -> Principal:
        """The agent principal of a process under the agent's uid that no run claims."""
        return agent_principal(self._tenant_id, self._user_id, f"agent-uid-{uid}")

    def attach(self, run: AgentRun, pid: int) -> AgentRun:
        """Remember the run's process, so its descendants are recognised without the token."""
        info = process_info(pid)
        start = None if info is None else info.start
        attached = AgentRun(run.token, run.principal, run.chat, pid, start)
        with self._lock:
            if run.token in self._runs:
                self._runs[run.token] = attached
        return attached

    def revoke(self, run: AgentRun) -> None:
        """End the run: its token stops working; its processes stay its agent."""
        with self._lock:
            ended = self._runs.pop(run.token, None)
            if ended is not None and ended.pid is not None:
                self._ended[ended.token] = ended
                while len(self._ended) > _ENDED_KEPT:
                    self._ended.popitem(last=False)

    def by_token(self, token: str) -> AgentRun | None:
        with self._lock:
            for known, run in self._runs.items():
                if secrets.compare_digest(known, token):
                    return run
        return None

    def by_process(self, chain: Sequence[ProcessInfo]) -> AgentRun | None:
        """The run (live, else recently ended) whose process ``chain`` descends from."""
        with self._lock:
            candidates = [*self._runs.values(), *reversed(self._ended.values())]
        return next((run for run in candidates if run.holds(chain)), None)


class AgentRunner:
    """Runs ``[agent] command``. Thread-safe: each call is its own process.

    At most ``max_output`` bytes of stdout and stderr are kept (``capture``; a cut answer ends with
    a marker saying so). The process gets an allowlisted environment (``isolation.allowlisted_env``:
    never vigil's secrets) plus ``VIGIL_SOCKET``, ``VIGIL_CHAT_ID``, ``VIGIL_SESSION_ID``,
    ``VIGIL_SKILL`` and a per-run ``VIGIL_AGENT_TOKEN``; it starts with no capability
    (``isolation.clean_start``), under ``[agent] run_as``'s uid when named. Requests bearing the
    token, or from the run's process, its descendants or what it left behind, act as the agent
    (DESIGN.md §10) in the session of the chat's conversation. The command starts behind a gate
    (``/bin/sh`` reads one empty line, then execs it in place), written only once the run holds its
    pid."""

    def __init__(
        self,
        command: Sequence[str] | None,
        timeout: timedelta,
        socket_path: Path,
        tokens: AgentTokens,
        *,
        environ: Mapping[str, str] | None = None,
        pass_env: Sequence[str] = (),
        user: AgentUser | None = None,
        skill: Path | None = None,
        max_output: int = MAX_OUTPUT,
    ) -> None:
        self._command = list(command) if command else None
        self._max_output = max_output
        self._timeout_s = timeout.total_seconds()
        self._socket_path = socket_path
        self._tokens = tokens
        self._environ = allowlisted_env(os.environ if environ is None else environ, pass_env)
        if skill is not None:
            self._environ[ENV_SKILL] = str(skill)
        self._user = user

    def ask(self, text: str, chat: str) -> str:
        """The agent's answer to ``text`` (stdout, stripped, at most :data:`MAX_ANSWER`).
        :class:`ConfigError` when no agent is configured; :class:`VigilError` when it fails,
        times out or answers nothing."""
        if not self._command:
            raise ConfigError("no agent is configured: set [agent] command in vigil.toml")
        run = self._tokens.issue(chat)
        env = {
            **self._environ,
            ENV_SOCKET: str(self._socket_path),
            ENV_CHAT_ID: chat,
            ENV_AGENT_TOKEN: run.token,
            ENV_SESSION_ID: run.principal.session_id or "",
        }
        if self._user is not None:
            env["HOME"] = str(self._user.home)
        try:
            return self._run(run, env, text)
        finally:
            self._tokens.revoke(run)

    def _run(self, run: AgentRun, env: dict[str, str], text: str) -> str:
        command = self._command or []
        name = Path(command[0]).name if command else "agent"
        user = self._user
        try:
            proc = subprocess.Popen(
                [*_GATE, *command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,  # its own process group: a timeout kills all of it
                cwd=None if user is None else user.working_dir(),
                preexec_fn=clean_start(user),  # no capability; run_as's uid and gid, no groups
            )
        except OSError as exc:
            raise VigilError(f"cannot start the agent {name!r}: {exc.strerror}") from None
        self._tokens.attach(run, proc.pid)
        try:  # the gate's line first: only now, its pid held, may the command run
            got = communicate(proc, b"\n" + text.encode("utf-8"), self._max_output, self._timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise VigilError(f"the agent did not answer within {self._timeout_s:g}s") from None
        out, err = got.stdout, got.stderr
        if got.stdout_dropped or got.stderr_dropped:
            dropped = got.stdout_dropped + got.stderr_dropped
            log.warning("agent %s wrote %d bytes past the output cap: dropped", name, dropped)
        if proc.returncode in (126, 127) and err.startswith(_GATE[3].encode() + b":"):
            why = err.decode("utf-8", "replace").strip().rsplit(": ", 1)[-1][:100]
            raise VigilError(f"cannot start the agent {name!r}: {why}")  # the gate's exec failed
        if proc.returncode != 0:
            detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            log.warning("agent %s exited %s: %s", name, proc.returncode, detail[0][:200])
            raise VigilError(f"the agent exited with status {proc.returncode}")
        answer = out.decode("utf-8", "replace").strip()
        if not answer:
            raise VigilError("the agent answered nothing")
        return _bounded(answer, self._max_output if got.stdout_dropped else None)


def _bounded(answer: str, cap: int | None) -> str:
    """``answer`` within :data:`MAX_ANSWER`; ``cap``: the output was cut there, which it says."""
    marker = "…" if cap is None else f"\n[agent output truncated at {cap} bytes]"
    if cap is None and len(answer) <= MAX_ANSWER:
        return answer
    return answer[: MAX_ANSWER - len(marker)] + marker


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Release the agent's pipes (never read again: what it still writes is not kept), then end
    it and everything it started."""
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=_KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue
