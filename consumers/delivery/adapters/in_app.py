"""The ``in_app`` destination: a record in the per-user ledger topic ``notifications``.

The record is keyed by subject (``["<tenant>","<user>"]``) and carries the delivery key, so
readers dedupe; its value is the Avro ``notification`` schema. The adapter does no I/O: its
``send`` returns the record in :attr:`SendResult.records`, and the delivery consumer produces
it with its transactional producer **in the same transaction that records ``delivered``** —
that is what keeps it in the transaction: the ledger record and the delivered state commit
together or not at all, and a fenced (zombie) worker's copy is aborted and never seen by
``read_committed`` readers. (A ``produce`` callable called from the thread pool would land
outside any open transaction, between the claim and the result transactions.)

``wake_session`` (seed 003): a content-free wake record — kind ``wake``, the subject, session
and delivery key, no text — returned in :attr:`SendResult.after_commit`. The consumer writes it
only after the transaction holding the ledger record has committed (best effort: a crash in
between loses the wake, never the notification; clients reread the ledger). It has the same
key, so it lands after its notification in the same partition.

The text and trigger are sealed under the subject's data key (the ``sealer`` is the delivery
worker's key ring), with ``retain_until`` = now + the watcher's delivery retention; without the
key (the subject erased meanwhile) nothing of them is written.

Left out: the ledger's reader and ``:ack`` (the HTTP API).
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
