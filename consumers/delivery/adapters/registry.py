"""From operator configuration to adapters: ``[destinations.*]`` and ``[chats.*]`` become one
adapter per name, resolved by a delivery's ``target``.

Owns :func:`build_adapters` and :class:`AdapterRegistry`: an undefined reference fails closed
(``rejected``); secrets are read once from the variables configuration names (unset refuses to
start); all HTTP adapters share one keep-alive client. Leaves out authorizing the target.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from types import TracebackType
from typing import TextIO

import httpx
from pydantic import SecretStr

from consumers.delivery.adapters.base import Adapter, SendResult
from consumers.delivery.adapters.chat import ChatAdapter, TelegramConfig
from consumers.delivery.adapters.console import ConsoleAdapter
from consumers.delivery.adapters.in_app import InAppAdapter, InAppConfig
from consumers.delivery.adapters.log import LogAdapter
from consumers.delivery.adapters.signing import signing_key
from consumers.delivery.adapters.webhook import WebhookAdapter, WebhookConfig
from pipeline.clock import Clock
from pipeline.config import (
    ConsoleChat,
    InAppDestination,
    LogDestination,
    TelegramChat,
    VigilConfig,
    WebhookDestination,
)
from pipeline.http import DEFAULT_MAX_CONNECTIONS, make_client
from pipeline.kafka.topics import Topic
from pipeline.records.sealing import Sealer
from pipeline.rules.errors import ConfigError
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import ErrorCode

__all__ = ["AdapterRegistry", "build_adapters"]

_log = logging.getLogger(__name__)


class AdapterRegistry:
    """Adapters by target name. Thread-safe to read; :meth:`close` once, at shutdown.

    A named variable that is unset or empty refuses to start (a ``ConfigError`` that names the
    variable, never a value); a webhook without ``secret_env`` is sent unsigned. The registry owns
    the shared HTTP client and closes it.
    """

    def __init__(
        self, adapters: Mapping[str, Adapter], *, client: httpx.Client | None = None
    ) -> None:
        self._adapters = dict(adapters)
        self._client = client

    @property
    def targets(self) -> frozenset[str]:
        return frozenset(self._adapters)

    def resolve(self, target: str) -> Adapter | None:
        return self._adapters.get(target)

    def send(self, entry: OutboxEntry) -> SendResult:
        """Send through the target's adapter: ``rejected`` for an unknown target, ``internal``
        for an adapter's own bug (logged by type only: messages may hold URLs or text)."""
        adapter = self.resolve(entry.target)
        if adapter is None:
            return SendResult.failed(ErrorCode.REJECTED)
        try:
            return adapter.send(entry)
        except Exception as exc:
            _log.error(
                "adapter %s failed on delivery %s: %s",
                adapter.kind.value,
                entry.delivery_key,
                type(exc).__name__,
            )
            return SendResult.failed(ErrorCode.INTERNAL)

    def close(self) -> None:
        for adapter in self._adapters.values():
            adapter.close()
        if self._client is not None:
            self._client.close()

    def __enter__(self) -> AdapterRegistry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _secret(environ: Mapping[str, str], variable: str, key: str) -> SecretStr:
    value = environ.get(variable)
    if not value:
        raise ConfigError(f"{key}: environment variable {variable} is not set or empty")
    return SecretStr(value)


def _signing_secret(environ: Mapping[str, str], variable: str, key: str) -> SecretStr:
    """A webhook secret, refused here, naming the key, unless it is a Standard Webhooks one."""
    secret = _secret(environ, variable, key)
    try:
        signing_key(secret.get_secret_value())
    except ConfigError as exc:
        raise ConfigError(f"{key}: {variable}: {exc}") from None
    return secret


def build_adapters(
    config: VigilConfig,
    *,
    environ: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    clock: Clock | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    sealer: Sealer | None = None,
) -> AdapterRegistry:
    """One adapter per configured destination and chat. ``stdout`` feeds ``log`` and
    ``console`` (default: the process's stdout at each write); ``sealer`` (the delivery
    worker's key ring) seals ``in_app`` ledger records and is required when one is configured."""
    env = os.environ if environ is None else environ
    client = make_client(max_connections=max_connections)
    adapters: dict[str, Adapter] = {}
    try:
        for name, dest in config.destinations.items():
            if isinstance(dest, WebhookDestination):
                secret = (
                    None
                    if dest.secret_env is None
                    else _signing_secret(env, dest.secret_env, f"destinations.{name}.secret_env")
                )
                adapters[name] = WebhookAdapter(
                    WebhookConfig(url=dest.url, secret=secret, timeout=dest.timeout),
                    client=client,
                    clock=clock,
                )
            elif isinstance(dest, InAppDestination):
                if sealer is None:
                    raise ConfigError(f"destinations.{name}: an in_app ledger needs the key ring")
                topic = config.kafka.topology().name(Topic.NOTIFICATIONS)
                adapters[name] = InAppAdapter(InAppConfig(topic=topic), sealer=sealer, clock=clock)
            elif isinstance(dest, LogDestination):
                adapters[name] = LogAdapter(stdout)
        for name, chat in config.chats.items():
            if isinstance(chat, TelegramChat):
                token = _secret(env, chat.token_env, f"chats.{name}.token_env")
                adapters[name] = ChatAdapter(
                    TelegramConfig(api_base=chat.api_base, token=token, chat_id=chat.chat_id),
                    client=client,
                    clock=clock,
                )
            elif isinstance(chat, ConsoleChat):
                adapters[name] = ConsoleAdapter(stdout, clock=clock)
    except BaseException:
        client.close()
        raise
    return AdapterRegistry(adapters, client=client)
