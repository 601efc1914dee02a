"""The ``watcher-state`` record (``schemas/watcher_state.v2.avsc``): a watcher's runtime state
as the evaluator keeps it in its compacted changelog (DESIGN §2)."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from pipeline.records.codec import Codec, decoded, json_text, parse_json
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.watcher_state import AppliedTrigger, WatcherState

__all__ = ["WATCHER_STATE", "decode_state", "encode_state"]

WATCHER_STATE: Final = "watcher_state"


def encode_state(
    codec: Codec,
    key: tuple[str, str, str],
    source_id: str,
    state: WatcherState,
    updated_at: datetime,
    trigger_text: str | None = None,
) -> bytes:
    """``trigger_text``: the checkpoint trigger's JSON, when the caller has it."""
    checkpoint = state.checkpoint
    return codec.encode(
        WATCHER_STATE,
        {
            "tenant_id": key[0],
            "user_id": key[1],
            "watcher_id": key[2],
            "source_id": source_id,
            "version": state.version,
            "status": state.status.value,
            "activated_at": state.activated_at,
            "checkpoint": None
            if checkpoint is None
            else {
                "trigger_key": checkpoint.trigger_key,
                "trigger": trigger_text or json_text(checkpoint.trigger, "trigger"),
                "observed_at": checkpoint.observed_at,
                "position": checkpoint.position,
            },
            "recent_triggers": list(state.recent_triggers),
            "last_outcome": None if state.last_outcome is None else state.last_outcome.value,
            "last_reason": None if state.last_reason is None else state.last_reason.value,
            "evaluations": state.evaluations,
            "closed_reason": None if state.closed_reason is None else state.closed_reason.value,
            "revision": state.revision,
            "holds": state.holds,
            "notified_at": state.notified_at,
            "updated_at": updated_at,
        },
    )


def decode_state(codec: Codec, data: bytes) -> WatcherState:
    """A stored state, every field checked as it enters (:class:`SerdeError` naming the one
    that is not a state's)."""
    value = decoded(codec, WATCHER_STATE, data)
    raw = value["checkpoint"]
    try:
        checkpoint = None
        if raw is not None:
            checkpoint = AppliedTrigger(
                raw["trigger_key"],
                parse_json(raw["trigger"], "checkpoint.trigger"),
                raw["observed_at"],
                raw["position"],
            )
        return WatcherState(
            value["version"],
            value["status"],
            value["activated_at"],
            checkpoint,
            value["recent_triggers"],
            value["last_outcome"],
            value["last_reason"],
            value["evaluations"],
            value["closed_reason"],
            value["revision"],
            value["holds"],
            value["notified_at"],
        )
    except DefinitionError as exc:
        raise SerdeError(f"not a watcher state: {exc}") from None
