"""Why a watcher did or did not fire: its receipts in time order, joined with delivery state.

Owns :class:`ExplainRow`, :func:`explain` (the pure join) and :func:`read_explanation` (reads
``receipts`` and ``delivery-state`` for one watcher). A shredded receipt is an ``erased`` row
showing nothing of its trigger or decision; one past ``retain_until`` is not shown. Leaves out
printing (``pipeline.cli.explain_cmd``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.scan import Progress, scan
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.ops.replay_reader import Scope, read_receipts
from pipeline.rules.data_keys import ERASED
from pipeline.rules.instants import rfc3339_micros
from pipeline.rules.receipts import Receipt
from pipeline.rules.retention import retained
from pipeline.runtime.keys import read_keys

__all__ = ["DeliveryView", "ExplainRow", "explain", "read_delivery_states", "read_explanation"]


@dataclass(frozen=True, slots=True)
class DeliveryView:
    """The latest ``delivery-state`` of one delivery key (``purged``: tombstoned)."""

    status: str
    attempt: int = 0
    reason: str | None = None
    last_error: str | None = None
    delivered_at: datetime | None = None
    purged: bool = False


@dataclass(frozen=True, slots=True)
class ExplainRow:
    evaluated_at: datetime
    version: int
    outcome: str
    reason: str
    trigger: Mapping[str, str]
    evidence_digest: str
    authorization: str
    note: str
    position: str | None
    delivery_key: str | None
    delivery: DeliveryView | None
    erased: bool = False

    def as_json(self) -> dict[str, Any]:
        if self.erased:
            return {
                "evaluated_at": rfc3339_micros(self.evaluated_at),
                "version": self.version,
                "erased": True,
            }
        delivery = self.delivery
        return {
            "evaluated_at": rfc3339_micros(self.evaluated_at),
            "version": self.version,
            "outcome": self.outcome,
            "reason": self.reason,
            "trigger": dict(self.trigger),
            "evidence_digest": self.evidence_digest,
            "authorization": self.authorization,
            "note": self.note,
            "position": self.position,
            "delivery_key": self.delivery_key,
            "delivery": None
            if delivery is None
            else {
                "status": delivery.status,
                "attempt": delivery.attempt,
                "reason": delivery.reason,
                "last_error": delivery.last_error,
                "delivered_at": None
                if delivery.delivered_at is None
                else rfc3339_micros(delivery.delivered_at),
            },
        }


_AWAITING = DeliveryView(status="awaiting_delivery")  # in the outbox, no delivery-state yet


def explain(
    receipts: Iterable[Receipt],
    deliveries: Mapping[str, DeliveryView],
    now: datetime | None = None,
) -> list[ExplainRow]:
    """Each evaluation in time order, with the delivery state of the entry it created; erased
    ones say so and nothing else; those past retention at ``now`` are left out."""
    rows = []
    for r in sorted(receipts, key=lambda r: (r.evaluated_at, r.position or "")):
        if now is not None and not retained(r.retain_until, now):
            continue
        if r.erased:
            rows.append(_erased_row(r))
            continue
        delivery = None
        if r.delivery_key is not None:
            delivery = deliveries.get(r.delivery_key, _AWAITING)
        rows.append(
            ExplainRow(
                evaluated_at=r.evaluated_at,
                version=r.watcher_version,
                outcome=r.outcome.value,
                reason=r.reason.value,
                trigger=r.trigger,
                evidence_digest=r.evidence_digest,
                authorization=r.authorization,
                note=r.note,
                position=r.position,
                delivery_key=r.delivery_key,
                delivery=delivery,
            )
        )
    return rows


def _erased_row(r: Receipt) -> ExplainRow:
    return ExplainRow(
        evaluated_at=r.evaluated_at,
        version=r.watcher_version,
        outcome=ERASED,
        reason=ERASED,
        trigger={},
        evidence_digest="",
        authorization="",
        note="",
        position=None,
        delivery_key=None,
        delivery=None,
        erased=True,
    )


def read_delivery_states(
    bootstrap: str,
    topology: Topology,
    codec: AvroCodec,
    keys: set[str],
    progress: Progress | None = None,
) -> dict[str, DeliveryView]:
    """The latest delivery state of each of ``keys``."""
    out: dict[str, DeliveryView] = {}
    if not keys:
        return out
    for msg in scan(bootstrap, topology.name(Topic.DELIVERY_STATE), progress=progress):
        key = (msg.key() or b"").decode("utf-8", "replace")
        if key not in keys:
            continue
        data = msg.value()
        if data is None:
            previous = out.get(key)
            status = previous.status if previous is not None else "purged"
            out[key] = DeliveryView(status=status, purged=True)
            continue
        _type, value = codec.decode(data)
        out[key] = DeliveryView(
            status=value["status"],
            attempt=int(value["attempt"]),
            reason=value.get("reason"),
            last_error=value.get("last_error"),
            delivered_at=value.get("delivered_at"),
        )
    return out


def read_explanation(
    bootstrap: str,
    topology: Topology,
    tenant_id: str,
    user_id: str,
    watcher_id: str,
    progress: Progress | None = None,
    *,
    keks: KeyEncryptionKeys | None = None,
    now: datetime | None = None,
) -> list[ExplainRow]:
    """One watcher's evaluations, read from ``receipts`` and ``delivery-state``, opened with
    the subject's keys as they are now (``keks`` default to ``$VIGIL_MASTER_KEYS``)."""
    codec = default_codec()
    ring = KeyRing(keks or KeyEncryptionKeys.load(), codec)
    read_keys(bootstrap, topology, ring, [(tenant_id, user_id)])
    scope = Scope(tenant_id, user_id, watcher_id)
    receipts = read_receipts(bootstrap, topology, codec, ring, scope, progress)
    keys = {r.delivery_key for r in receipts if r.delivery_key is not None and not r.erased}
    deliveries = read_delivery_states(bootstrap, topology, codec, keys, progress)
    return explain(receipts, deliveries, now or datetime.now(UTC))
