"""The adapter interface: what a destination gets, what it answers, what a person reads.

Owns :class:`Adapter` (``send`` synchronous and thread-safe: called from the consumer's thread
pool between its claim and result transactions), :class:`SendResult` (categorical only, never a
response body; Kafka records returned for the consumer to produce), :func:`message_text` and
:func:`webhook_body`. Leaves out what a result means and choosing an adapter (``registry``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from pipeline.http import Reply, classify_status, parse_retry_after
from pipeline.rules.instants import rfc3339_micros
from pipeline.rules.keys import canonical_json
from pipeline.rules.message import Channel, for_channel
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import ErrorCode
from pipeline.rules.schedules import late_note, sent_late_by

__all__ = [
    "Adapter",
    "AdapterKind",
    "OutboundRecord",
    "SendResult",
    "body_object",
    "message_text",
    "webhook_body",
]


class AdapterKind(StrEnum):
    """Which adapter sent a delivery: the ``adapter`` label of delivery metrics."""

    WEBHOOK = "webhook"
    IN_APP = "in_app"
    LOG = "log"
    CHAT = "chat"
    CONSOLE = "console"


@dataclass(frozen=True, slots=True)
class OutboundRecord:
    """A Kafka record an adapter asks the consumer to write (topic name, key, value bytes).

    The consumer picks the partition as everywhere else: ``partition_for(key, n)``.
    """

    topic: str
    key: bytes
    value: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class SendResult:
    """What one attempt came to. ``ok`` with no error, or not ``ok`` with exactly one code.

    ``repeat_risk``: the destination takes no idempotency key, so a crash between this send
    and recording it can repeat the message (chats); the consumer counts it in a metric.
    ``records`` must be produced in the same transaction that records this result, so they
    exist exactly when the result does; ``after_commit`` only once that transaction has
    committed (best effort, e.g. the ``wake_session`` wake).
    """

    ok: bool
    error: ErrorCode | None = None
    retry_after: timedelta | None = None
    repeat_risk: bool = False
    records: tuple[OutboundRecord, ...] = ()
    after_commit: tuple[OutboundRecord, ...] = ()

    def __post_init__(self) -> None:
        if self.ok == (self.error is not None):
            raise ValueError("a SendResult is ok without an error, or failed with one")
        if self.retry_after is not None and self.retry_after < timedelta(0):
            raise ValueError("retry_after is never negative")

    @classmethod
    def delivered(cls, *, repeat_risk: bool = False) -> SendResult:
        return cls(ok=True, repeat_risk=repeat_risk)

    @classmethod
    def failed(
        cls,
        error: ErrorCode,
        *,
        retry_after: timedelta | None = None,
        repeat_risk: bool = False,
    ) -> SendResult:
        return cls(
            ok=False, error=ErrorCode(error), retry_after=retry_after, repeat_risk=repeat_risk
        )

    @classmethod
    def of_reply(
        cls,
        reply: Reply | ErrorCode,
        now: datetime,
        *,
        repeat_risk: bool = False,
        retry_after: timedelta | None = None,
    ) -> SendResult:
        """The categorical result of :func:`pipeline.http.post`; ``retry_after`` is an API's own
        hint, used when the response has no ``Retry-After`` header."""
        if isinstance(reply, ErrorCode):
            return cls.failed(reply, repeat_risk=repeat_risk)
        error = classify_status(reply.status)
        if error is None:
            return cls.delivered(repeat_risk=repeat_risk)
        wait = None
        if error in (ErrorCode.HTTP_429, ErrorCode.HTTP_5XX):
            wait = parse_retry_after(reply.retry_after, now)
            if wait is None:
                wait = retry_after
        return cls.failed(error, retry_after=wait, repeat_risk=repeat_risk)

    @property
    def label(self) -> str:
        """``"delivered"`` or the error code: the ``result`` label of delivery metrics."""
        return "delivered" if self.error is None else self.error.value


class Adapter(Protocol):
    """A destination. ``send`` never raises for a destination's failure: it returns a code."""

    @property
    def kind(self) -> AdapterKind: ...

    def send(self, entry: OutboxEntry) -> SendResult: ...

    def close(self) -> None: ...


def message_text(entry: OutboxEntry, channel: Channel, at: datetime | None = None) -> str:
    """What a person reads, escaped for ``channel``: the text (``send``, ``prompt``) or the
    rendered message (``notify``; an entry from before messages: the watcher and its outcome).
    In a chat, where the text is all there is, a late one adds when it was due and how late it
    is ``at`` (sent), when known (the ledger, webhooks and logs carry ``late`` and ``due_at``)."""
    text = entry.text if entry.text is not None else entry.message
    if text is None:
        text = f"{entry.watcher_id}: {entry.outcome.value}"
    if entry.late and channel is Channel.CHAT:
        late = None if at is None else sent_late_by(entry.due_at, entry.created_at, True, at)
        text = f"{text}\n(late: {late_note(entry.due_at, late)})"
    return for_channel(text, channel)


def body_object(entry: OutboxEntry) -> dict[str, Any]:
    """The JSON object of DESIGN.md §9 "A webhook delivery" (``text`` is null for ``notify``),
    with ``message``, what a person reads (:func:`message_text`)."""
    return {
        "delivery_key": entry.delivery_key,
        "watcher_id": entry.watcher_id,
        "tenant_id": entry.tenant_id,
        "user_id": entry.user_id,
        "outcome": entry.outcome.value,
        "trigger": dict(entry.trigger),
        "evidence_digest": entry.evidence_digest,
        "due_at": rfc3339_micros(entry.due_at),
        "late": entry.late,
        "text": entry.text,
        "message": message_text(entry, Channel.WEBHOOK),
    }


def webhook_body(entry: OutboxEntry) -> bytes:
    """The body as RFC 8785 canonical JSON: the same bytes on every attempt, so the signature
    of a retry signs exactly what the first attempt sent. Raises ``DefinitionError`` for text
    that is not valid Unicode (a delivery that can never be sent)."""
    return canonical_json(body_object(entry), "delivery")
