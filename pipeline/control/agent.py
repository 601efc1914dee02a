"""The agent behind ``prompt`` and ``query``: one fresh process per call, and its agent token.

Owns :class:`AgentRunner`, which runs ``[agent] command`` as an ephemeral session (seed 001): a
new process per call, the prompt on stdin, the answer on stdout, a timeout that kills the whole
process group, never inside a Kafka transaction (callers run it between two). The process gets
``VIGIL_SOCKET``, ``VIGIL_CHAT_ID`` and a per-run ``VIGIL_AGENT_TOKEN`` from
:class:`AgentTokens`: requests bearing that token — or coming from that process or its
children — act with the agent role (schedule and propose only, DESIGN.md §10), bound to a
session of their own.

Left out: what the agent is (any command that reads stdin and answers on stdout), delivering
the answer (``dispatch`` for immediate prompts, the delivery consumer for scheduled ones).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Final

from pipeline.rules.authz import Principal, Role
from pipeline.rules.errors import ConfigError, VigilError

__all__ = [
    "ENV_AGENT_TOKEN",
    "ENV_CHAT_ID",
    "ENV_SOCKET",
    "MAX_ANSWER",
    "AgentRun",
    "AgentRunner",
    "AgentTokens",
]

log = logging.getLogger(__name__)

ENV_SOCKET: Final = "VIGIL_SOCKET"
ENV_CHAT_ID: Final = "VIGIL_CHAT_ID"
ENV_AGENT_TOKEN: Final = "VIGIL_AGENT_TOKEN"
MAX_ANSWER: Final = 4096  # one chat message
_KILL_GRACE_S: Final = 2.0


@dataclass(frozen=True, slots=True)
class AgentRun:
    """One live agent process: who it acts as, for which chat."""

    token: str
    principal: Principal
    chat: str
    pid: int | None = None


class AgentTokens:
    """Per-run agent tokens, valid while their run lasts. Thread-safe."""

    def __init__(self, tenant_id: str, user_id: str) -> None:
        self._tenant_id = tenant_id
        self._user_id = user_id
        self._runs: dict[str, AgentRun] = {}
        self._lock = threading.Lock()

    def issue(self, chat: str) -> AgentRun:
        token = secrets.token_urlsafe(24)
        session = "agent-run-" + secrets.token_hex(4)
        principal = Principal(
            name=f"agent:{session}",
            role=Role.AGENT,
            tenant_id=self._tenant_id,
            user_id=self._user_id,
            session_id=session,
        )
        run = AgentRun(token, principal, chat)
        with self._lock:
            self._runs[token] = run
        return run

    def attach(self, run: AgentRun, pid: int) -> None:
        """Remember the run's process, so its children are recognised without the token."""
        with self._lock:
            if run.token in self._runs:
                self._runs[run.token] = AgentRun(run.token, run.principal, run.chat, pid)

    def revoke(self, run: AgentRun) -> None:
        with self._lock:
            self._runs.pop(run.token, None)

    def by_token(self, token: str) -> AgentRun | None:
        with self._lock:
            for known, run in self._runs.items():
                if secrets.compare_digest(known, token):
                    return run
        return None

    def by_pid(self, pids: Sequence[int]) -> AgentRun | None:
        """The run whose process is one of ``pids`` (a peer and its ancestors)."""
        with self._lock:
            for run in self._runs.values():
                if run.pid is not None and run.pid in pids:
                    return run
        return None


class AgentRunner:
    """Runs ``[agent] command``. Thread-safe: each call is its own process."""

    def __init__(
        self,
        command: Sequence[str] | None,
        timeout: timedelta,
        socket_path: Path,
        tokens: AgentTokens,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._command = list(command) if command else None
        self._timeout_s = timeout.total_seconds()
        self._socket_path = socket_path
        self._tokens = tokens
        self._environ = dict(os.environ if environ is None else environ)

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
        }
        try:
            return self._run(run, env, text)
        finally:
            self._tokens.revoke(run)

    def _run(self, run: AgentRun, env: dict[str, str], text: str) -> str:
        name = Path(self._command[0]).name if self._command else "agent"
        try:
            proc = subprocess.Popen(
                self._command or [],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,  # its own process group: a timeout kills all of it
            )
        except OSError as exc:
            raise VigilError(f"cannot start the agent {name!r}: {exc.strerror}") from None
        self._tokens.attach(run, proc.pid)
        try:
            out, err = proc.communicate(text.encode("utf-8"), timeout=self._timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise VigilError(f"the agent did not answer within {self._timeout_s:g}s") from None
        if proc.returncode != 0:
            detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            log.warning("agent %s exited %s: %s", name, proc.returncode, detail[0][:200])
            raise VigilError(f"the agent exited with status {proc.returncode}")
        answer = out.decode("utf-8", "replace").strip()
        if not answer:
            raise VigilError("the agent answered nothing")
        if len(answer) > MAX_ANSWER:
            answer = answer[: MAX_ANSWER - 1] + "…"
        return answer


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End the agent and everything it started, then release its pipes."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.communicate(timeout=_KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue
