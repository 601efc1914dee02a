"""The ``ticker-state`` record (``schemas/ticker_state.v1.avsc``): the poll ticker's own table.

One record type with exactly one of two parts set: a watcher's
:class:`~pipeline.rules.ticker.TickerMemory` (the last instant it enumerated), or a
:class:`PinnedState`, the latest state of one run or session that feeds a pinned evaluator
(keyed ``["<event type>","<tenant_id>","<id>"]``, :func:`state_key`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from pipeline.records.codec import Codec, decoded, json_text, parse_json
from pipeline.rules.errors import SerdeError
from pipeline.rules.keys import canonical_json
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.ticker import TickerMemory

__all__ = [
    "TICKER_STATE",
    "PinnedState",
    "decode_ticker_state",
    "encode_memory",
    "encode_pinned",
    "state_key",
]

TICKER_STATE: Final = "ticker_state"


@dataclass(frozen=True, slots=True)
class PinnedState:
    """The latest known state of one run or session, as an event reported it."""

    event_type: str
    tenant_id: str
    subject_id: str
    source_id: str
    event_id: str
    observed_at: datetime
    payload: Mapping[str, Any]

    @property
    def key(self) -> str:
        return state_key(self.event_type, self.tenant_id, self.subject_id)

    def newer_than(self, other: PinnedState | None) -> bool:
        """Latest wins by observation time; a replayed older event never rolls state back."""
        return other is None or self.observed_at >= other.observed_at


def state_key(event_type: str, tenant_id: str, subject_id: str) -> str:
    """The ``ticker-state`` key of one run's or session's state (RFC 8785 JSON array)."""
    return canonical_json([event_type, tenant_id, subject_id]).decode("utf-8")


def encode_memory(
    codec: Codec,
    parts: tuple[str, str, str],
    source_id: str,
    memory: TickerMemory,
    updated_at: datetime,
) -> bytes:
    return codec.encode(
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


def encode_pinned(codec: Codec, state: PinnedState) -> bytes:
    return codec.encode(
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
                "payload": json_text(dict(state.payload), "payload"),
            },
        },
    )


def decode_ticker_state(codec: Codec, data: bytes) -> TickerMemory | PinnedState:
    """A ``ticker-state`` value: a watcher's memory or a run's or session's state."""
    value = decoded(codec, TICKER_STATE, data)
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
    payload = parse_json(pinned["payload"], "payload")
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
