"""Where deliveries go and what polls: ``[destinations.*]`` (webhook, in-app, log), ``[chats.*]``
(console, Telegram) and ``[tools.*]``. A watcher's ``delivery.target`` names one destination or
chat (``model`` refuses a name used by both).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import (
    BeforeValidator,
    Field,
    model_validator,
)

from pipeline.config.values import EnvName, Section, Url
from pipeline.rules.durations import Duration

__all__ = [
    "ChatConfig",
    "ConsoleChat",
    "DestinationConfig",
    "InAppDestination",
    "LogDestination",
    "TelegramChat",
    "ToolConfig",
    "WebhookDestination",
]


class WebhookDestination(Section):
    kind: Literal["webhook"]
    url: Url
    secret_env: EnvName | None = None  # the HMAC signing secret's variable
    unsigned: bool = False  # send without a signature: only when said so (fail closed)
    timeout: Duration = timedelta(seconds=10)

    @model_validator(mode="after")
    def _signed(self) -> WebhookDestination:
        if self.secret_env is None and not self.unsigned:
            raise ValueError(
                "a webhook is signed: name its secret's variable in secret_env, or set "
                "unsigned = true to send it without a signature (receivers cannot tell it is "
                "vigil's)"
            )
        if self.secret_env is not None and self.unsigned:
            raise ValueError("unsigned = true and a secret_env: choose one")
        return self


class InAppDestination(Section):
    kind: Literal["in_app"]


class LogDestination(Section):
    kind: Literal["log"]


DestinationConfig = Annotated[
    WebhookDestination | InAppDestination | LogDestination, Field(discriminator="kind")
]


class ConsoleChat(Section):
    kind: Literal["console"]


class TelegramChat(Section):
    """A Telegram chat: deliveries go to it and, with ``listen`` (the default), the daemon reads
    what its person writes there (``getUpdates`` long polls of ``poll_timeout``; ``queue``
    messages wait for a turn, then a polite refusal)."""

    kind: Literal["telegram"]
    api_base: Url = "https://api.telegram.org"
    token_env: EnvName
    chat_id: Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, int) else v)]
    listen: bool = True
    poll_timeout: Duration = timedelta(seconds=25)
    queue: int = Field(default=4, ge=0, le=100)

    @model_validator(mode="after")
    def _poll_timeout(self) -> TelegramChat:
        if not timedelta(seconds=1) <= self.poll_timeout <= timedelta(seconds=50):
            raise ValueError("poll_timeout is between 1s and 50s")
        return self


ChatConfig = Annotated[ConsoleChat | TelegramChat, Field(discriminator="kind")]


class ToolConfig(Section):
    """A governed tool instance; ``kind`` pins the implementation (``http.json@v1``)."""

    kind: str = Field(pattern=r"^[a-z][a-z0-9_.-]*@v[0-9]+$")
    url: Url | None = None
    token_env: EnvName | None = None
    timeout: Duration = timedelta(seconds=10)
