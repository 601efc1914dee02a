"""The poll ticker's records: ``tick`` values out, ``ticker-state`` values in and out.

Owns the mapping between :class:`~pipeline.rules.ticker.TickerMemory` /
:class:`~producers.ticker.tools.pinned.PinnedState` and ``schemas/ticker_state.v1.avsc`` (one record,
exactly one of ``watcher`` and ``pinned`` set), and the ``tick`` record of
``schemas/tick.v1.avsc`` (payloads as RFC 8785 canonical JSON text). The evaluator reads ticks
with ``pipeline.records.evaluator.evidence_from_tick``.

Left out: bytes framing (``pipeline.kafka.serde``), topics and what is decided.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from pipeline.kafka.serde import SchemaRegistry
from pipeline.rules.errors import SerdeError
from pipeline.rules.keys import canonical_json
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.outcomes import ErrorCode
from pipeline.rules.ticker import TickerMemory, TickKind
from producers.ticker.tools.pinned import PinnedState

__all__ = [
    "TICK",
    "TICKER_STATE",
    "TickRecord",
    "decode_ticker_state",
    "encode_memory",
    "encode_pinned",
    "encode_tick",
]

TICK: Final = "tick"
TICKER_STATE: Final = "ticker_state"


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


def encode_tick(registry: SchemaRegistry, tick: TickRecord) -> bytes:
    payload = None
    if tick.payload is not None:
        payload = canonical_json(dict(tick.payload), "payload").decode("utf-8")
    return registry.encode(
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


def encode_memory(
    registry: SchemaRegistry,
    parts: tuple[str, str, str],
    source_id: str,
    memory: TickerMemory,
    updated_at: datetime,
) -> bytes:
    return registry.encode(
        TICKER_STATE,
        {
            "watcher": {
                "tenant_id": parts[0],
                "user_id": parts[1],
                "watcher_id": parts[2],
                "source_id": source_id,
                "version": memory.version,
                "status": memory.status.value,
                "enumerated_through": memory.enumerated_through,
                "final_done": memory.final_done,
                "expiry_done": memory.expiry_done,
                "one_shot_done": memory.one_shot_done,
                "updated_at": updated_at,
            },
            "pinned": None,
        },
    )


def encode_pinned(registry: SchemaRegistry, state: PinnedState) -> bytes:
    return registry.encode(
        TICKER_STATE,
        {
            "watcher": None,
            "pinned": {
                "evaluator": state.event_type,
                "tenant_id": state.tenant_id,
                "subject_id": state.subject_id,
                "source_id": state.source_id,
                "event_id": state.event_id,
                "observed_at": state.observed_at,
                "payload": canonical_json(dict(state.payload), "payload").decode("utf-8"),
            },
        },
    )


def decode_ticker_state(registry: SchemaRegistry, data: bytes) -> TickerMemory | PinnedState:
    """A ``ticker-state`` value: a watcher's memory or a run's or session's state."""
    record_type, value = registry.decode(data)
    if record_type != TICKER_STATE:
        raise SerdeError(f"expected a ticker_state record, got {record_type}")
    watcher: dict[str, Any] | None = value.get("watcher")
    pinned: dict[str, Any] | None = value.get("pinned")
    if watcher is not None and pinned is None:
        return TickerMemory(
            version=int(watcher["version"]),
            status=WatcherStatus(watcher["status"]),
            enumerated_through=watcher["enumerated_through"],
            final_done=bool(watcher["final_done"]),
            expiry_done=bool(watcher["expiry_done"]),
            one_shot_done=bool(watcher["one_shot_done"]),
        )
    if pinned is None or watcher is not None:
        raise SerdeError("a ticker_state record sets exactly one of watcher and pinned")
    payload = json.loads(pinned["payload"])
    if not isinstance(payload, dict):
        raise SerdeError("a pinned state's payload is a JSON object")
    return PinnedState(
        event_type=pinned["evaluator"],
        tenant_id=pinned["tenant_id"],
        subject_id=pinned["subject_id"],
        source_id=pinned["source_id"],
        event_id=pinned["event_id"],
        observed_at=pinned["observed_at"],
        payload=payload,
    )
