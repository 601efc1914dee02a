"""The ``tick`` record (``schemas/tick.v1.avsc``): one scheduled instant of one watcher, and
what its governed tool answered; the poll ticker writes it, the evaluator reads it as evidence.

A tick is keyed by source id for co-partitioning but names its watcher (DESIGN §10: ticks belong
to one watcher). Payloads travel as RFC 8785 canonical JSON text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from pipeline.records.codec import Codec, json_text
from pipeline.records.event import SharedEvidence, checked_instant, payload_object
from pipeline.rules.bounds import MAX_INSTANT
from pipeline.rules.budgets import MAX_AMOUNT
from pipeline.rules.errors import SerdeError
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.outcomes import ErrorCode
from pipeline.rules.ticker import TickKind

__all__ = ["EXPIRY_STEP", "TICK", "TickRecord", "encode_tick", "evidence_from_tick"]

TICK: Final = "tick"
# An expiry tick stands for the first instant after the deadline, so it always reads "expired"
# (the final evaluation *at* the deadline is the ticker's ordinary poll tick).
EXPIRY_STEP: Final = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class TickRecord:
    """One ``tick``: which watcher version, which instant, and what the tool said."""

    kind: TickKind
    tenant_id: str
    user_id: str
    watcher_id: str
    watcher_version: int
    source_id: str
    scheduled_at: datetime
    observed_at: datetime
    payload: Mapping[str, Any] | None = None
    tool_error: ErrorCode | None = None
    usage_tokens: int = 0
    usage_micro_usd: int = 0
    late: bool = False


def encode_tick(codec: Codec, tick: TickRecord) -> bytes:
    payload = None if tick.payload is None else json_text(dict(tick.payload), "payload")
    return codec.encode(
        TICK,
        {
            "kind": tick.kind.value,
            "tenant_id": tick.tenant_id,
            "user_id": tick.user_id,
            "watcher_id": tick.watcher_id,
            "watcher_version": tick.watcher_version,
            "source_id": tick.source_id,
            "scheduled_at": tick.scheduled_at,
            "observed_at": tick.observed_at,
            "payload": payload,
            "tool_error": None if tick.tool_error is None else tick.tool_error.value,
            "usage_tokens": tick.usage_tokens,
            "usage_micro_usd": tick.usage_micro_usd,
            "late": tick.late,
        },
    )


def evidence_from_tick(value: Mapping[str, Any], position: str) -> Evidence:
    """A decoded ``tick`` value as evidence naming its watcher, read at input ``position``."""
    kind = value["kind"]
    scheduled = checked_instant(value["scheduled_at"], "scheduled_at")
    observed = checked_instant(value["observed_at"], "observed_at")
    if kind == "expiry" and scheduled < MAX_INSTANT:
        scheduled = scheduled + EXPIRY_STEP
    error = value.get("tool_error")
    tokens, micro_usd = int(value.get("usage_tokens", 0)), int(value.get("usage_micro_usd", 0))
    if not (0 <= tokens <= MAX_AMOUNT and 0 <= micro_usd <= MAX_AMOUNT):
        raise SerdeError(f"a tick's usage is 0..{MAX_AMOUNT}: tokens {tokens}, µUSD {micro_usd}")
    return SharedEvidence(
        source_kind=EvidenceKind.POLL if kind == "poll" else EvidenceKind.SCHEDULE,
        source_id=value["source_id"],
        observed_at=observed,
        scheduled_at=scheduled,
        payload=payload_object(value.get("payload")),
        watcher_key=(value["tenant_id"], value["user_id"], value["watcher_id"]),
        tool_error=None if error is None else ErrorCode(error),
        late=bool(value.get("late", False)),
        tokens=tokens,
        micro_usd=micro_usd,
        position=position,
    )
