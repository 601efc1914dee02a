"""The ``notifications`` record (``schemas/notification.v2.avsc``; v1 still read): the per-user
in-app ledger, keyed by subject; readers dedupe on its delivery key (DESIGN §4).

Three kinds: a ``notification``, a content-free ``wake`` and an ``ack`` (keyed like its
notification). Text and trigger are sealed under the subject's data key; ``retain_until``
(creation plus ``delivery_retention``) is when the ledger stops showing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from pipeline.records.codec import Codec, decoded
from pipeline.records.sealing import Sealer, identity, open_fields, seal_fields
from pipeline.rules.data_keys import subject_owner

__all__ = [
    "NOTIFICATION",
    "NotificationKind",
    "decode_notification",
    "encode_notification",
]

NOTIFICATION: Final = "notification"
_SEALED: Final = ("text", "trigger")


class NotificationKind(StrEnum):
    NOTIFICATION = "notification"
    WAKE = "wake"
    ACK = "ack"


def _identity(kind: str, delivery_key: str) -> bytes:
    return identity(NOTIFICATION, kind, delivery_key)


def encode_notification(
    codec: Codec,
    sealer: Sealer,
    kind: NotificationKind,
    *,
    delivery_key: str,
    tenant_id: str,
    user_id: str,
    watcher_id: str,
    session_id: str | None,
    created_at: datetime,
    content: Mapping[str, Any] | None = None,
    retain_until: datetime | None = None,
) -> bytes:
    """One ledger record; ``content`` (outcome, verb, text, trigger, evidence digest, due time,
    lateness) only for a ``notification``, its text and trigger sealed."""
    value: dict[str, Any] = {
        "kind": kind.value,
        "delivery_key": delivery_key,
        "tenant_id": tenant_id,
        "user_id": user_id,
        "watcher_id": watcher_id,
        "session_id": session_id,
        "created_at": created_at,
        "retain_until": retain_until,
    }
    if content is not None:
        value.update(content)
        secret = {name: value.pop(name, None) for name in _SEALED}
        if secret["trigger"] is not None:
            secret["trigger"] = dict(secret["trigger"])
        value["sealed"] = seal_fields(
            sealer,
            subject_owner(tenant_id, user_id),
            _identity(kind.value, delivery_key),
            secret,
        )
    return codec.encode(NOTIFICATION, value)


def decode_notification(codec: Codec, sealer: Sealer, data: bytes) -> dict[str, Any]:
    """A ledger record as a dict of its fields; ``trigger`` parsed, and ``erased`` true when
    its sealed text and trigger cannot be opened any more."""
    value = decoded(codec, NOTIFICATION, data)
    sealed = value.pop("sealed", None)
    value["erased"] = False
    if sealed is None:  # never written so: plaintext would be a downgrade erasure misses
        erased = value.get("text") is not None or value.get("trigger") is not None
        value.update(text=None, trigger=None, erased=erased)
        return value
    opened = open_fields(sealer, _identity(value["kind"], value["delivery_key"]), sealed)
    if opened is None:
        value.update(text=None, trigger=None, erased=True)
    else:
        value.update(text=opened.get("text"), trigger=opened.get("trigger"))
    return value
