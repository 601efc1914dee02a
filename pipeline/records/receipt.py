"""The ``receipt`` record (``schemas/receipt.v2.avsc``; v1 still read): the privacy-filtered
record of one evaluation (DESIGN §10, §11). The evaluator's hot loop encodes straight from
``Evaluation.receipt_fields`` (the same bytes, no model built).

The trigger and the kept payload are sealed under the watcher version's own data key
(``pipeline.rules.data_keys.evidence_owner``), so ``cancel`` shreds them with the watcher and
erasure with the subject; a receipt whose key is gone reads as ``erased``. ``retain_until`` is
the evaluation time plus the watcher's ``evidence_retention``: readers drop the receipt after.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from pipeline.records.codec import Codec, decoded, json_text
from pipeline.records.sealing import Sealer, identity, open_fields, seal_text
from pipeline.rules.data_keys import KeyOwner, evidence_owner
from pipeline.rules.instants import to_epoch_micros
from pipeline.rules.keys import encode_fields
from pipeline.rules.receipts import Receipt

__all__ = ["RECEIPT", "decode_receipt", "encode_receipt", "receipt_identity"]

RECEIPT: Final = "receipt"


def receipt_identity(
    tenant_id: str,
    user_id: str,
    watcher_id: str,
    version: int,
    trigger_key: str,
    evaluated_at: datetime,
) -> bytes:
    """The associated data of a receipt's sealed fields: the record type and the watcher
    version's fields (one prefix per version, remembered), then the trigger and the time."""
    return _version_identity(tenant_id, user_id, watcher_id, version)[0] + encode_fields(
        (trigger_key, str(to_epoch_micros(evaluated_at)))
    )


@functools.lru_cache(maxsize=16_384, typed=True)  # typed: version 1, never True
def _version_identity(
    tenant_id: str, user_id: str, watcher_id: str, version: int
) -> tuple[bytes, KeyOwner]:
    """A watcher version's receipt identity prefix and the owner of its evidence key: the
    same for every receipt of that version, so made once (10,000+ watchers fit)."""
    prefix = identity(RECEIPT, tenant_id, user_id, watcher_id, str(version))
    return prefix, evidence_owner(tenant_id, user_id, watcher_id, version)


def encode_receipt(
    codec: Codec,
    sealer: Sealer,
    receipt: Receipt | Mapping[str, Any],
    source_id: str,
    trigger_text: str | None = None,
    retain_until: datetime | None = None,
) -> bytes:
    """A receipt, or its fields as ``Evaluation.receipt_fields`` holds them. ``trigger_text``
    is the trigger's JSON when the caller has it."""
    fields = receipt if isinstance(receipt, dict) else dict(receipt)
    budget = fields["budget"]
    tool_error = fields["tool_error"]
    payload = fields["payload"]
    tenant, user, watcher = fields["tenant_id"], fields["user_id"], fields["watcher_id"]
    version = fields["watcher_version"]
    aad = receipt_identity(
        tenant, user, watcher, version, fields["trigger_key"], fields["evaluated_at"]
    )
    owner = _version_identity(tenant, user, watcher, version)[1]
    # RFC 8785 of {"payload", "trigger"}: keys in order, values already canonical.
    content = (
        '{"payload":'
        + ("null" if payload is None else json_text(payload, "payload"))
        + ',"trigger":'
        + (trigger_text or json_text(fields["trigger"], "trigger"))
        + "}"
    )
    return codec.encode(
        RECEIPT,
        {
            "tenant_id": tenant,
            "user_id": user,
            "watcher_id": watcher,
            "watcher_version": version,
            "source_id": source_id,
            "evaluated_at": fields["evaluated_at"],
            "outcome": fields["outcome"].value,
            "reason": fields["reason"].value,
            "evidence_digest": fields["evidence_digest"],
            "trigger": None,
            "trigger_key": fields["trigger_key"],
            "observed_at": fields["observed_at"],
            "position": fields["position"],
            "authorized": fields["authorized"],
            "authorization": fields["authorization"],
            "budget": None if budget is None else budget.value,
            "tool_error": None if tool_error is None else tool_error.value,
            "payload": None,
            "delivery_key": fields["delivery_key"],
            "note": fields["note"],
            "sealed": seal_text(sealer, owner, aad, content),
            "retain_until": retain_until,
        },
    )


def decode_receipt(codec: Codec, sealer: Sealer, data: bytes) -> tuple[Receipt, str]:
    """The receipt (``erased`` when its key is gone) and the source id it was evaluated on."""
    value = decoded(codec, RECEIPT, data)
    sealed = value.pop("sealed", None)
    source_id = value.pop("source_id")
    fields = dict(value)
    if sealed is None:  # never written so: plaintext would be a downgrade erasure misses
        fields["erased"] = True
        fields["trigger"] = {}
        fields["payload"] = None
    else:
        aad = receipt_identity(
            value["tenant_id"],
            value["user_id"],
            value["watcher_id"],
            value["watcher_version"],
            value["trigger_key"],
            value["evaluated_at"],
        )
        opened = open_fields(sealer, aad, sealed)
        fields["erased"] = opened is None
        fields["trigger"] = {} if opened is None else opened.get("trigger") or {}
        fields["payload"] = None if opened is None else opened.get("payload")
    return Receipt.model_validate(fields), source_id
