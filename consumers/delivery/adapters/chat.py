"""The ``chat`` destination, Telegram-shaped: ``POST {api_base}/bot{token}/sendMessage`` with JSON
``{"chat_id", "text"}`` (DESIGN.md §9), plain text.

Owns :class:`ChatAdapter`: no idempotency key, so every result says ``repeat_risk``; the token
lives only in the request URL and never reaches a log. Leaves out which chat a schedule targets
(frozen by the control plane) and Telegram features beyond plain text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta

import httpx
from pydantic import SecretStr

from consumers.delivery.adapters.base import AdapterKind, SendResult, message_text
from pipeline.clock import Clock, SystemClock
from pipeline.http import (
    DEFAULT_TIMEOUT,
    MAX_RETRY_AFTER,
    Reply,
    make_client,
    post,
)
from pipeline.rules.message import Channel
from pipeline.rules.outbox import OutboxEntry

__all__ = ["ChatAdapter", "TelegramConfig"]


@dataclass(frozen=True, slots=True)
class TelegramConfig:
    api_base: str
    token: SecretStr = field(repr=False)
    chat_id: str
    timeout: timedelta = DEFAULT_TIMEOUT


def _chat_id(value: str) -> int | str:
    """Numeric ids travel as JSON integers, as the Bot API documents; ``@channel`` as text."""
    try:
        return int(value)
    except ValueError:
        return value


def _api_retry_after(reply: Reply) -> timedelta | None:
    """Telegram's flood control puts the wait in the body: ``parameters.retry_after``."""
    try:
        data = json.loads(reply.head)
        seconds = data["parameters"]["retry_after"]
    except (ValueError, TypeError, KeyError):
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        return None
    return min(timedelta(seconds=seconds), MAX_RETRY_AFTER)


class ChatAdapter:
    """Thread-safe; shares ``client`` when given one (and then leaves closing it to the owner)."""

    kind = AdapterKind.CHAT

    def __init__(
        self,
        config: TelegramConfig,
        *,
        client: httpx.Client | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._config = config
        self._url = (
            f"{config.api_base.rstrip('/')}/bot{config.token.get_secret_value()}/sendMessage"
        )
        self._chat_id = _chat_id(config.chat_id)
        self._owns_client = client is None
        self._client = client if client is not None else make_client(timeout=config.timeout)
        self._clock: Clock = clock or SystemClock()

    def __repr__(self) -> str:
        return f"ChatAdapter(api_base={self._config.api_base!r}, chat_id={self._chat_id!r})"

    def send(self, entry: OutboxEntry) -> SendResult:
        body = json.dumps(
            {
                "chat_id": self._chat_id,
                "text": message_text(entry, Channel.CHAT, self._clock.now()),
            },
            ensure_ascii=False,
        ).encode("utf-8", errors="replace")
        reply = post(
            self._client,
            self._url,
            content=body,
            headers={"Content-Type": "application/json"},
            timeout=self._config.timeout,
        )
        hint = _api_retry_after(reply) if isinstance(reply, Reply) and reply.status == 429 else None
        return SendResult.of_reply(reply, self._clock.now(), repeat_risk=True, retry_after=hint)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> ChatAdapter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
