"""The ``in_app`` destination: a record in the per-user ledger topic ``notifications``.

Owns :class:`InAppAdapter`: no I/O; ``send`` returns the record (keyed by subject, carrying the
delivery key, text and trigger sealed under the subject's key) for the consumer to produce in
the transaction that records ``delivered``, and ``wake_session``'s wake for after that commit.
Leaves out the ledger's reader and ``:ack`` (the HTTP API).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from consumers.delivery.adapters.base import AdapterKind, OutboundRecord, SendResult, message_text
from pipeline.clock import Clock, SystemClock
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.records.notification import NotificationKind, encode_notification
from pipeline.records.sealing import Sealer
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.keys import subject_key
from pipeline.rules.message import Channel
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import ErrorCode
from pipeline.rules.retention import retain_until

__all__ = ["InAppAdapter", "InAppConfig"]


@dataclass(frozen=True, slots=True)
class InAppConfig:
    topic: str  # the full topic name, e.g. "vigil.notifications"


class InAppAdapter:
    """The ledger adapter. Its record is produced by the delivery consumer's transactional
    producer in the same transaction that records ``delivered``: the ledger record and the
    delivered state commit together or not at all, and a fenced worker's copy is never seen by
    ``read_committed`` readers (a ``produce`` from the thread pool would land outside any open
    transaction, between the claim and the result transactions).

    ``wake_session`` (seed 003): a content-free wake record — kind ``wake``, the subject,
    session and delivery key, no text — returned in :attr:`SendResult.after_commit`, written
    only after the ledger record's transaction committed (a crash in between loses the wake,
    never the notification). It has the same key, so it lands after its notification.

    Text and trigger are sealed under the subject's data key with ``retain_until`` = now + the
    watcher's delivery retention; without the key (the subject erased) nothing of them is
    written.
    """

    kind = AdapterKind.IN_APP

    def __init__(
        self,
        config: InAppConfig,
        *,
        sealer: Sealer,
        clock: Clock | None = None,
        codec: AvroCodec | None = None,
    ) -> None:
        self._config = config
        self._sealer = sealer
        self._clock: Clock = clock or SystemClock()
        self._codec = codec or default_codec()

    def ledger_record(self, entry: OutboxEntry, now: datetime) -> OutboundRecord:
        """The notification itself; its text is what a person reads (``message_text``)."""
        content = {
            "outcome": entry.outcome.value,
            "verb": entry.verb,
            "text": message_text(entry, Channel.IN_APP),
            "trigger": entry.trigger,
            "evidence_digest": entry.evidence_digest,
            "due_at": entry.due_at,
            "late": entry.late,
        }
        return self._record(entry, NotificationKind.NOTIFICATION, now, content)

    def wake_record(self, entry: OutboxEntry, now: datetime) -> OutboundRecord:
        """The content-free wake: who and which notification, nothing of what it says."""
        return self._record(entry, NotificationKind.WAKE, now)

    def _record(
        self,
        entry: OutboxEntry,
        kind: NotificationKind,
        now: datetime,
        content: dict[str, Any] | None = None,
    ) -> OutboundRecord:
        retention = entry.delivery_retention
        value = encode_notification(
            self._codec,
            self._sealer,
            kind,
            delivery_key=entry.delivery_key,
            tenant_id=entry.tenant_id,
            user_id=entry.user_id,
            watcher_id=entry.watcher_id,
            session_id=entry.session_id,
            created_at=now,
            content=content,
            retain_until=retain_until(now, retention),
        )
        return OutboundRecord(
            topic=self._config.topic,
            key=subject_key(entry.tenant_id, entry.user_id).encode("utf-8"),
            value=value,
        )

    def send(self, entry: OutboxEntry) -> SendResult:
        now = self._clock.now()
        try:
            ledger = self.ledger_record(entry, now)
            wake = (self.wake_record(entry, now),) if entry.wake_session else ()
        except (DefinitionError, SerdeError):
            return SendResult.failed(ErrorCode.REJECTED)  # can never be encoded: terminal
        return SendResult(ok=True, records=(ledger,), after_commit=wake)

    def close(self) -> None:
        """Nothing to release: the consumer owns the producer."""
