"""Executing a fired ``prompt`` or ``run`` outbox entry where delivery runs (DESIGN.md §4, §5).

Owns :class:`VerbExecutor` (the host's rule asked again first; a ``prompt``'s answer returned as
a ``send`` entry written with its delivered record; a ``run`` started by the daemon, fire and
forget) and :class:`SocketAgent` / :class:`SocketRunner`, which ask the local daemon rather than
run anything here. Leaves out claiming, retrying and recording (the delivery consumer).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from consumers.delivery.adapters.base import OutboundRecord, SendResult
from pipeline.clock import Clock, SystemClock
from pipeline.control.core import AgentPort, RunPort
from pipeline.control.run import RunStarted
from pipeline.control.socket.client import call
from pipeline.control.verbs import VerbErrorKind
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.records.outbox_entry import encode_outbox_entry
from pipeline.records.sealing import Sealer
from pipeline.rules.commands.host import NO_HOST, Host, host_verdict
from pipeline.rules.commands.immediate import answer_entry
from pipeline.rules.errors import ConfigError, DefinitionError, VigilError
from pipeline.rules.instants import rfc3339_seconds
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import ErrorCode

__all__ = ["EXECUTED_VERBS", "SocketAgent", "SocketRunner", "VerbExecutor"]

log = logging.getLogger(__name__)

EXECUTED_VERBS: Final = frozenset({"prompt", "run"})
_REFUSED: Final = frozenset(
    {
        VerbErrorKind.INVALID,
        VerbErrorKind.DENIED,
        VerbErrorKind.NOT_FOUND,
        VerbErrorKind.UNKNOWN_VERB,
    }
)


class SocketAgent:
    """The agent as the local daemon runs it (verb ``query``: answer returned, nothing sent)."""

    def __init__(self, socket_path: Path, timeout_s: float = 300.0) -> None:
        self._path = socket_path
        self._timeout_s = timeout_s

    def ask(self, text: str, chat: str) -> str:
        response = call(
            self._path, {"verb": "query", "text": text, "chat": chat}, timeout_s=self._timeout_s
        )
        if not response.ok or response.result is None:
            message = response.error.message if response.error else "no answer"
            raise VigilError(f"the daemon's agent failed: {message}")
        return str(response.result["answer"])


class SocketRunner:
    """Scripts as the local daemon starts them (verb ``run``): a refusal is a
    :class:`DefinitionError`, a daemon that does not answer a :class:`VigilError`."""

    def __init__(self, socket_path: Path, timeout_s: float = 30.0) -> None:
        self._path = socket_path
        self._timeout_s = timeout_s

    def check(self, args: Sequence[str]) -> Any:
        return None  # the daemon checks when it starts the script

    def start(
        self,
        args: Sequence[str],
        *,
        chat: str,
        delivery_key: str,
        schedule_name: str | None = None,
        schedule_time: datetime | None = None,
    ) -> RunStarted:
        request: dict[str, Any] = {
            "verb": "run",
            "args": list(args),
            "chat": chat,
            "delivery_key": delivery_key,
            "schedule_name": schedule_name,
            "schedule_time": None if schedule_time is None else rfc3339_seconds(schedule_time),
        }
        response = call(self._path, request, timeout_s=self._timeout_s)
        if response.error is not None:
            message = f"the daemon did not start {args[0]!r}: {response.error.message}"
            if response.error.code in _REFUSED:
                raise DefinitionError(message, response.error.field)
            raise VigilError(message)
        result = response.result or {}
        return RunStarted(Path(str(result.get("script", args[0]))), int(result.get("pid", 0)))


class VerbExecutor:
    """Runs fired ``prompt`` and ``run`` entries. Thread-safe (each call is its own process).

    An entry that is not the daemon subject's, under the control purpose, for one of its chats is
    ``rejected`` (dead-lettered), never executed — whatever the command processor let through or a
    forged record says.

    - ``prompt`` is two steps so the agent never runs twice for one answer: run the agent, then
      return the answer as a ``send`` outbox entry in :attr:`SendResult.records`, keyed by
      ``derived_delivery_key(prompt key, "answer")`` — the consumer writes it in the transaction
      that marks the prompt delivered. A failed agent is ``unavailable`` (retried with backoff); no
      agent configured is ``rejected``.
    - ``run`` asks the daemon to start the allowlisted script (``VIGIL_CHAT_ID``, ``VIGIL_SOCKET``,
      ``VIGIL_DELIVERY_KEY``, ``VIGIL_SCHEDULE_NAME``, ``VIGIL_SCHEDULE_TIME``); started is
      delivered (fire and forget); a refusal (outside the allowlist, a revoked grant) is
      ``rejected``, a daemon that does not answer ``unavailable``.
    """

    def __init__(
        self,
        agent: AgentPort,
        runner: RunPort,
        outbox_topic: str,
        *,
        sealer: Sealer,
        host: Host = NO_HOST,
        codec: AvroCodec | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``sealer`` seals a prompt's answer (the delivery worker's key ring); ``host`` is the
        daemon's subject and chats (the only ones whose entries execute)."""
        self._agent = agent
        self._sealer = sealer
        self._runner = runner
        self._topic = outbox_topic
        self._host = host
        self._codec = codec or default_codec()
        self._clock = clock or SystemClock()

    def execute(self, entry: OutboxEntry) -> SendResult:
        verdict = host_verdict(
            self._host,
            entry.verb,
            tenant_id=entry.tenant_id,
            user_id=entry.user_id,
            purpose=entry.purpose,
            target=entry.target,
        )
        if not verdict.allowed:
            log.warning(
                "%s entry %s refused: not the daemon's (%s)",
                entry.verb,
                entry.delivery_key,
                verdict.value,
            )
            return SendResult.failed(ErrorCode.REJECTED)
        if entry.verb == "prompt":
            return self._prompt(entry)
        if entry.verb == "run":
            return self._run(entry)
        return SendResult.failed(ErrorCode.REJECTED)

    def _prompt(self, entry: OutboxEntry) -> SendResult:
        if not entry.text:
            return SendResult.failed(ErrorCode.REJECTED)
        try:
            answer = self._agent.ask(entry.text, entry.target)
        except ConfigError:
            return SendResult.failed(ErrorCode.REJECTED)
        except VigilError:
            return SendResult.failed(ErrorCode.UNAVAILABLE)
        follow_up = answer_entry(entry, answer, self._clock.now())
        record = OutboundRecord(
            topic=self._topic,
            key=follow_up.delivery_key.encode("utf-8"),
            value=encode_outbox_entry(self._codec, self._sealer, follow_up),
        )
        return SendResult(ok=True, records=(record,))

    def _run(self, entry: OutboxEntry) -> SendResult:
        if not entry.args:
            return SendResult.failed(ErrorCode.REJECTED)
        try:
            self._runner.start(
                entry.args,
                chat=entry.target,
                delivery_key=entry.delivery_key,
                schedule_name=entry.schedule_name,
                schedule_time=entry.schedule_time,
            )
        except DefinitionError:
            return SendResult.failed(ErrorCode.REJECTED)
        except VigilError:
            return SendResult.failed(ErrorCode.UNAVAILABLE)
        return SendResult.delivered()
