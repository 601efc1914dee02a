"""The ``lifecycle`` record (``schemas/lifecycle.v1.avsc``): a watcher's new state, or (no
watcher id) a subject's erasure, written only by the command processor and read whole by the
evaluator, the ticker and delivery (DESIGN §10 "Cancel and erase reach every owner").

Owns :func:`encode_lifecycle` (from a :class:`~pipeline.rules.commands.model.LifecycleChange`)
and :class:`LifecycleRecord`, which decides whether an undelivered entry is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from pipeline.records.codec import Codec, decoded
from pipeline.records.delivery_state import DeliveryRecord
from pipeline.rules.commands.model import LifecycleChange
from pipeline.rules.errors import SerdeError
from pipeline.rules.lifecycle import WatcherStatus, cancel_drops, erasure_drops

__all__ = ["ERASED", "LIFECYCLE", "LifecycleRecord", "decode_lifecycle", "encode_lifecycle"]

LIFECYCLE: Final = "lifecycle"
ERASED: Final = "erased"  # the status of a subject-wide lifecycle record


def encode_lifecycle(
    codec: Codec, change: LifecycleChange, tenant_id: str, user_id: str, at: datetime
) -> bytes:
    """One watcher's state, or (no watcher id) a subject's erasure."""
    return codec.encode(
        LIFECYCLE,
        {
            "scope": "subject" if change.watcher_id is None else "watcher",
            "tenant_id": tenant_id,
            "user_id": user_id,
            "watcher_id": change.watcher_id,
            "version": change.version,
            "revision": change.revision,
            "status": change.status,
            "reason": None if change.reason is None else change.reason.value,
            "at": at,
        },
    )


@dataclass(frozen=True, slots=True)
class LifecycleRecord:
    """A watcher's lifecycle state, or (``watcher_id is None``) a subject's erasure."""

    tenant_id: str
    user_id: str
    watcher_id: str | None
    version: int
    status: str  # a WatcherStatus value, or ERASED
    at: datetime
    revision: int = 0
    reason: str | None = None  # why it closed (a CloseReason value), if it did

    @property
    def erasure(self) -> bool:
        return self.watcher_id is None and self.status == ERASED

    @property
    def cancel(self) -> bool:
        return self.watcher_id is not None and self.status == WatcherStatus.CANCELLED.value

    @property
    def drops_anything(self) -> bool:
        return self.erasure or self.cancel

    def drops(self, record: DeliveryRecord, created_at: datetime) -> bool:
        """Whether an undelivered entry of ``record`` must be dropped (``cancelled``).

        A cancelled watcher drops its entries up to its cancelled version (a later version
        reuses the id and is another watcher, DESIGN.md §10); an erasure drops the subject's
        entries created up to the erasure. Expired and satisfied watchers still deliver what
        they decided before closing (§10 "Expiry vs. the deadline notification").
        """
        if (record.tenant_id, record.user_id) != (self.tenant_id, self.user_id):
            return False
        if self.erasure:
            return erasure_drops(self.at, created_at)
        return (
            self.cancel
            and self.watcher_id == record.watcher_id
            and cancel_drops(self.version, record.watcher_version)
        )


def decode_lifecycle(codec: Codec, data: bytes) -> LifecycleRecord:
    value = decoded(codec, LIFECYCLE, data)
    scope = value["scope"]
    watcher_id = value["watcher_id"] if scope == "watcher" else None
    if scope == "watcher" and watcher_id is None:
        raise SerdeError("a watcher lifecycle record without a watcher_id")
    return LifecycleRecord(
        tenant_id=value["tenant_id"],
        user_id=value["user_id"],
        watcher_id=watcher_id,
        version=value["version"],
        status=value["status"],
        at=value["at"],
        revision=value.get("revision") or 0,
        reason=value.get("reason"),
    )
