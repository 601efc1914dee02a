"""Evidence: one event, one poll result at one scheduled instant, or one schedule fire.

Owns the in-memory evidence record the evaluator judges, its trigger identity (what makes two
records the *same* evidence, DESIGN.md §1) and the nine-field input of the evidence digest
(§10). Decoding records from Kafka and judging freshness are left to the serde and
``freshness``; the encodings themselves live in ``keys``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import rfc3339_micros, rfc3339_seconds, utc
from pipeline.rules.keys import EventTrigger, InstantTrigger, Trigger, evidence_digest_of
from pipeline.rules.native import NATIVE
from pipeline.rules.outcomes import ErrorCode

__all__ = ["Evidence", "EvidenceKind", "position_of", "trigger_json"]


class EvidenceKind(StrEnum):
    EVENT = "event"
    POLL = "poll"
    SCHEDULE = "schedule"


def position_of(topic: str, partition: int, offset: int) -> str:
    """The opaque input position a checkpoint and a receipt record."""
    return f"{topic}:{partition}:{offset}"


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a source saw. Ticks (poll, schedule) name their watcher in ``watcher_key``.

    ``position`` is the opaque input position (topic-partition-offset) the checkpoint records;
    it is not evidence and takes no part in the digest. ``tokens`` and ``micro_usd`` are the
    governed tool's usage for budgets.
    """

    source_kind: EvidenceKind
    source_id: str
    observed_at: datetime
    event_type: str | None = None
    event_id: str | None = None
    envelope_id: str | None = None
    cursor: str | None = None
    scheduled_at: datetime | None = None
    payload: Mapping[str, Any] = field(default_factory=dict)
    watcher_key: tuple[str, str, str] | None = None
    tool_error: ErrorCode | None = None
    late: bool = False
    tokens: int = 0
    micro_usd: int = 0
    position: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "observed_at", utc(self.observed_at))
        if self.scheduled_at is not None:
            object.__setattr__(self, "scheduled_at", utc(self.scheduled_at))
        if self.source_kind is EvidenceKind.EVENT:
            if not self.event_type or not self.event_id:
                raise DefinitionError("an event needs event_type and event_id", "evidence")
        elif self.scheduled_at is None:
            raise DefinitionError("a poll or schedule fire needs scheduled_at", "evidence")
        if self.tokens < 0 or self.micro_usd < 0:
            raise DefinitionError("usage is a non-negative integer", "evidence.usage")

    def trigger(self) -> Trigger:
        """The trigger identity: event type and id, or the scheduled instant."""
        if self.source_kind is EvidenceKind.EVENT:
            assert self.event_type is not None and self.event_id is not None
            return EventTrigger(self.event_type, self.event_id)
        assert self.scheduled_at is not None
        if self.source_kind is EvidenceKind.POLL:
            return InstantTrigger("poll", self.scheduled_at)
        return InstantTrigger("schedule", self.scheduled_at)

    def digest_input(self) -> dict[str, Any]:
        """The nine fields of evidence digest v1 (§10), absent ones as ``None``."""
        return self._digest_fields(dict(self.payload))

    def digest(self) -> str:
        if NATIVE is not None:  # the nine fields read and written natively (instants in UTC)
            native: str | None = NATIVE.evidence_digest(self)
            if native is not None:
                return native
        payload = self.payload  # read only: no copy unless it is not a plain dict
        scheduled_at = self.scheduled_at
        return evidence_digest_of(
            self.source_kind.value,
            self.source_id,
            self.event_type,
            self.event_id,
            self.envelope_id,
            self.cursor,
            rfc3339_micros(self.observed_at),
            None if scheduled_at is None else rfc3339_micros(scheduled_at),
            payload if type(payload) is dict else {**payload},
        )

    def _digest_fields(self, payload: dict[str, Any]) -> dict[str, Any]:
        return {
            "source_kind": self.source_kind.value,
            "source_id": self.source_id,
            "event_type": self.event_type,
            "event_id": self.event_id,
            "envelope_id": self.envelope_id,
            "cursor": self.cursor,
            "observed_at": rfc3339_micros(self.observed_at),
            "scheduled_at": None
            if self.scheduled_at is None
            else rfc3339_micros(self.scheduled_at),
            "payload": payload,
        }


def trigger_json(trigger: Trigger) -> dict[str, str]:
    """A trigger as a JSON object (``kind`` plus its identity fields) for records and webhooks."""
    if isinstance(trigger, EventTrigger):
        return {"kind": "event", "event_type": trigger.event_type, "event_id": trigger.event_id}
    if isinstance(trigger, InstantTrigger):
        return {"kind": trigger.kind, "scheduled_at": rfc3339_seconds(trigger.scheduled_at)}
    return {"kind": "request", "request_id": trigger.request_id}
