"""The ``notifications`` record (``schemas/notification.v1.avsc``): the per-user in-app ledger,
keyed by subject; readers dedupe on the delivery key it carries (DESIGN §4).

Three kinds share the record: a ``notification`` (what an ``in_app`` delivery says), a
content-free ``wake`` (seed 003's ``wake_session``: who and which notification, nothing of what
it says) and an ``ack`` (the user read it; written by the API, keyed like its notification so
it lives and is erased exactly as long as the ledger does).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from pipeline.records.codec import Codec, json_text

__all__ = ["NOTIFICATION", "NotificationKind", "encode_notification"]

NOTIFICATION: Final = "notification"


class NotificationKind(StrEnum):
    NOTIFICATION = "notification"
    WAKE = "wake"
    ACK = "ack"


def encode_notification(
    codec: Codec,
    kind: NotificationKind,
    *,
    delivery_key: str,
    tenant_id: str,
    user_id: str,
    watcher_id: str,
    session_id: str | None,
    created_at: datetime,
    content: Mapping[str, Any] | None = None,
) -> bytes:
    """One ledger record; ``content`` (outcome, verb, text, trigger, evidence digest, due time,
    lateness) only for a ``notification``."""
    value: dict[str, Any] = {
        "kind": kind.value,
        "delivery_key": delivery_key,
        "tenant_id": tenant_id,
        "user_id": user_id,
        "watcher_id": watcher_id,
        "session_id": session_id,
        "created_at": created_at,
    }
    if content is not None:
        value.update(content)
        if value.get("trigger") is not None:
            value["trigger"] = json_text(dict(value["trigger"]), "trigger")
    return codec.encode(NOTIFICATION, value)
