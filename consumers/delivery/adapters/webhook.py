"""The ``webhook`` destination: a signed JSON POST that carries its own idempotency key.

Owns :class:`WebhookAdapter`: ``Idempotency-Key`` and ``webhook-id`` (the delivery key, the same
on every retry), ``webhook-timestamp``, ``webhook-signature`` when a secret is configured
(``signing``), and :func:`~consumers.delivery.adapters.base.webhook_body` as the body. Leaves
out retry timing (``pipeline.rules.dispatch``) and finding the secret (``registry``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import httpx
from pydantic import SecretStr

from consumers.delivery.adapters.base import AdapterKind, SendResult, webhook_body
from consumers.delivery.adapters.signing import sign, signing_key
from pipeline.clock import Clock, SystemClock
from pipeline.http import DEFAULT_TIMEOUT, make_client, post
from pipeline.rules.errors import DefinitionError
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import ErrorCode

__all__ = ["WebhookAdapter", "WebhookConfig"]


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    url: str
    secret: SecretStr | None = field(default=None, repr=False)  # None: unsigned
    timeout: timedelta = DEFAULT_TIMEOUT


class WebhookAdapter:
    """Thread-safe; shares ``client`` when given one (and then leaves closing it to the owner)."""

    kind = AdapterKind.WEBHOOK

    def __init__(
        self,
        config: WebhookConfig,
        *,
        client: httpx.Client | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._config = config
        self._key = None if config.secret is None else signing_key(config.secret.get_secret_value())
        self._owns_client = client is None
        self._client = client if client is not None else make_client(timeout=config.timeout)
        self._clock: Clock = clock or SystemClock()

    def headers(self, entry: OutboxEntry, body: bytes, timestamp: int) -> dict[str, str]:
        """The headers of one attempt (exposed so tests and docs show exactly what is sent)."""
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": entry.delivery_key,
            "webhook-id": entry.delivery_key,
            "webhook-timestamp": str(timestamp),
        }
        if self._key is not None:
            headers["webhook-signature"] = sign(self._key, entry.delivery_key, timestamp, body)
        return headers

    def send(self, entry: OutboxEntry) -> SendResult:
        try:
            body = webhook_body(entry)
        except DefinitionError:
            return SendResult.failed(ErrorCode.REJECTED)  # can never be encoded: terminal
        now = self._clock.now()
        reply = post(
            self._client,
            self._config.url,
            content=body,
            headers=self.headers(entry, body, int(now.timestamp())),
            timeout=self._config.timeout,
        )
        return SendResult.of_reply(reply, self._clock.now())

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> WebhookAdapter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
