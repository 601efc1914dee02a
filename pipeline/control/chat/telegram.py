"""The Bot API's ``getUpdates`` long poll, through vigil's one outbound HTTP client.

Owns :class:`BotApi`: one total deadline per poll, at most :data:`LIMIT` updates and
:data:`MAX_BODY` bytes per answer. An offset confirms every update below it (Telegram forgets them),
so the caller persists what it took first. The token lives only in the URL and never reaches a log.
Left out: reading the answer (``updates``) and sending (the chat adapter)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Final

import httpx
from pydantic import SecretStr

from pipeline.control.chat.updates import read_updates
from pipeline.http import Reply, classify_status, make_client, post
from pipeline.rules.outcomes import ErrorCode

__all__ = ["LIMIT", "MAX_BODY", "BotApi"]

LIMIT: Final = 20  # updates per answer: 20 of Telegram's longest fit in MAX_BODY
MAX_BODY: Final = 1 << 20
_MARGIN: Final = timedelta(seconds=10)  # beyond the long poll, for the answer to arrive


class BotApi:
    """One bot's ``getUpdates``. Not shared across threads (one poller per bot)."""

    def __init__(self, api_base: str, token: SecretStr, poll_timeout: timedelta) -> None:
        self._url = f"{api_base.rstrip('/')}/bot{token.get_secret_value()}/getUpdates"
        self._poll_s = int(poll_timeout.total_seconds())
        self._timeout = poll_timeout + _MARGIN
        self._client: httpx.Client = make_client(timeout=self._timeout, max_connections=1)

    def __repr__(self) -> str:
        return "BotApi(<token>)"

    def updates(self, offset: int) -> list[Any] | ErrorCode:
        """The updates from ``offset`` on (waiting up to the poll timeout for one), or why
        there are none: the transport's or the status's code, ``rejected`` for an answer that
        is no Bot API answer or is over :data:`MAX_BODY`."""
        body = json.dumps({"offset": offset, "timeout": self._poll_s, "limit": LIMIT}).encode()
        reply = post(
            self._client,
            self._url,
            content=body,
            headers={"Content-Type": "application/json", "Accept-Encoding": "identity"},
            timeout=self._timeout,
            read_limit=MAX_BODY,
        )
        if not isinstance(reply, Reply):
            return reply
        if reply.status != 200:
            return classify_status(reply.status) or ErrorCode.REJECTED
        found = read_updates(reply.head) if reply.complete else None
        return ErrorCode.REJECTED if found is None else found

    def close(self) -> None:
        self._client.close()
