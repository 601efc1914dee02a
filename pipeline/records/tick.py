"""The ``tick`` record (``schemas/tick.v2.avsc``; v1 still read): one scheduled instant of one
watcher and what its governed tool answered; the ticker writes it, the evaluator reads it.

Keyed by source id for co-partitioning, it names its watcher. The tool's payload is sealed under
the watcher version's data key (as its receipts), so a tick whose key is gone is
:class:`ErasedError` to its reader, never evidence with an empty payload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from pipeline.records.codec import Codec, json_text
from pipeline.records.event import SharedEvidence, checked_instant, payload_object
from pipeline.records.sealing import Sealer, identity, open_fields, seal_text
from pipeline.rules.bounds import MAX_INSTANT
from pipeline.rules.budgets import MAX_AMOUNT
from pipeline.rules.data_keys import evidence_owner
from pipeline.rules.errors import ErasedError, SerdeError
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.instants import to_epoch_micros
from pipeline.rules.outcomes import ErrorCode
from pipeline.rules.ticker import TickKind

__all__ = [
    "EXPIRY_STEP",
    "TICK",
    "TickRecord",
    "encode_tick",
    "evidence_from_tick",
    "tick_identity",
    "tick_payload",
]

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
    retain_until: datetime | None = None  # observed_at + the watcher's evidence_retention


def tick_identity(value: Mapping[str, Any]) -> bytes:
    """The associated data of a tick's sealed payload (from its plaintext fields)."""
    return identity(
        TICK,
        value["tenant_id"],
        value["user_id"],
        value["watcher_id"],
        str(value["watcher_version"]),
        str(value["kind"]),
        str(to_epoch_micros(value["scheduled_at"])),
    )


def encode_tick(codec: Codec, sealer: Sealer, tick: TickRecord) -> bytes:
    payload = None if tick.payload is None else json_text(dict(tick.payload), "payload")
    value: dict[str, Any] = {
        "kind": tick.kind.value,
        "tenant_id": tick.tenant_id,
        "user_id": tick.user_id,
        "watcher_id": tick.watcher_id,
        "watcher_version": tick.watcher_version,
        "source_id": tick.source_id,
        "scheduled_at": tick.scheduled_at,
        "observed_at": tick.observed_at,
        "payload": None,
        "tool_error": None if tick.tool_error is None else tick.tool_error.value,
        "usage_tokens": tick.usage_tokens,
        "usage_micro_usd": tick.usage_micro_usd,
        "late": tick.late,
        "retain_until": tick.retain_until,
    }
    if payload is not None:
        owner = evidence_owner(tick.tenant_id, tick.user_id, tick.watcher_id, tick.watcher_version)
        value["sealed"] = seal_text(sealer, owner, tick_identity(value), f'{{"payload":{payload}}}')
    return codec.encode(TICK, value)


def tick_payload(value: Mapping[str, Any], sealer: Sealer) -> dict[str, Any]:
    """The tick's payload object ({} when it has none); :class:`ErasedError` when it was sealed
    under a key that is gone (or withheld for want of one)."""
    sealed = value.get("sealed")
    if sealed is None:
        return payload_object(value.get("payload"))
    opened = open_fields(sealer, tick_identity(value), sealed)
    if opened is None:
        raise ErasedError(f"the payload of a tick of {value['watcher_id']!r} is erased")
    found = opened.get("payload")
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise SerdeError("a tick's payload is not a JSON object")
    return found


def evidence_from_tick(value: Mapping[str, Any], position: str, sealer: Sealer) -> Evidence:
    """A decoded ``tick`` value as evidence naming its watcher, read at input ``position``
    (:class:`ErasedError` when its sealed payload no longer opens)."""
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
        payload=tick_payload(value, sealer),
        watcher_key=(value["tenant_id"], value["user_id"], value["watcher_id"]),
        tool_error=None if error is None else ErrorCode(error),
        late=bool(value.get("late", False)),
        tokens=tokens,
        micro_usd=micro_usd,
        position=position,
    )
