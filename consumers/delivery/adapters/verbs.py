"""Executing a fired ``prompt`` or ``run`` outbox entry where delivery runs (DESIGN.md §4, §5).

Owns :class:`VerbExecutor`, which the delivery consumer calls for an entry whose verb is
``prompt`` or ``run`` (``send`` and ``notify`` go to an adapter as usual), between its claim
and result transactions, and which answers a categorical
:class:`~consumers.delivery.adapters.SendResult` like any adapter:

- ``prompt`` is two steps so the agent never runs twice for one answer: run the agent, then
  return the answer as a ``send`` outbox entry in :attr:`SendResult.records`, keyed by
  ``derived_delivery_key(prompt key, "answer")`` — the consumer writes it in the transaction
  that marks the prompt delivered. A failed agent is ``unavailable`` (retried with backoff);
  no agent configured is ``rejected``.
- ``run`` starts the allowlisted script with ``VIGIL_CHAT_ID``, ``VIGIL_SOCKET``,
  ``VIGIL_DELIVERY_KEY``, ``VIGIL_SCHEDULE_NAME``, ``VIGIL_SCHEDULE_TIME``; started is
  delivered (fire and forget); a script outside the allowlist is ``rejected``.

:class:`SocketAgent` asks the local daemon (verb ``query``) instead of running the agent in the
delivery process, so a fired prompt's agent gets the daemon's environment and an agent token
the daemon honours — the same as an immediate prompt.

Left out: claiming, retrying and recording (the delivery consumer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from consumers.delivery.adapters.base import OutboundRecord, SendResult
from pipeline.clock import Clock, SystemClock
from pipeline.control.core import AgentPort, RunPort
from pipeline.control.socket.client import call
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.records.outbox_entry import encode_outbox_entry
from pipeline.records.sealing import Sealer
from pipeline.rules.commands.immediate import answer_entry
from pipeline.rules.errors import ConfigError, DefinitionError, VigilError
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import ErrorCode

__all__ = ["EXECUTED_VERBS", "SocketAgent", "VerbExecutor"]

EXECUTED_VERBS: Final = frozenset({"prompt", "run"})


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


class VerbExecutor:
    """Runs fired ``prompt`` and ``run`` entries. Thread-safe (each call is its own process)."""

    def __init__(
        self,
        agent: AgentPort,
        runner: RunPort,
        outbox_topic: str,
        *,
        sealer: Sealer,
        codec: AvroCodec | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``sealer`` seals a prompt's answer (the delivery worker's key ring)."""
        self._agent = agent
        self._sealer = sealer
        self._runner = runner
        self._topic = outbox_topic
        self._codec = codec or default_codec()
        self._clock = clock or SystemClock()

    def execute(self, entry: OutboxEntry) -> SendResult:
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
        return SendResult.delivered()
