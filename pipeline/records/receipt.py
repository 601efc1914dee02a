"""The ``receipt`` record (``schemas/receipt.v2.avsc``; v1 still read): the privacy-filtered
record of one evaluation (DESIGN §10, §11), checked here when read back.

The trigger and the kept payload are sealed under the watcher version's own data key, so
``cancel`` shreds them with the watcher and erasure with the subject (then it reads as
``erased``); ``retain_until`` is the evaluation time plus ``evidence_retention``.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, Final

from pipeline.records.codec import Codec, decoded, json_text, string_map
from pipeline.records.sealing import Sealer, identity, open_fields, seal_text
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.data_keys import KeyOwner, evidence_owner
from pipeline.rules.errors import SerdeError
from pipeline.rules.instants import to_epoch_micros
from pipeline.rules.keys import encode_fields
from pipeline.rules.outcomes import ErrorCode, Outcome, Reason
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
    receipt: Receipt,
    source_id: str,
    trigger_text: str | None = None,
    retain_until: datetime | None = None,
) -> bytes:
    """A receipt; ``trigger_text`` is the trigger's JSON when the caller has it."""
    budget = receipt.budget
    tool_error = receipt.tool_error
    payload = receipt.payload
    tenant, user, watcher = receipt.tenant_id, receipt.user_id, receipt.watcher_id
    version = receipt.watcher_version
    aad = receipt_identity(
        tenant, user, watcher, version, receipt.trigger_key, receipt.evaluated_at
    )
    owner = _version_identity(tenant, user, watcher, version)[1]
    # RFC 8785 of {"payload", "trigger"}: keys in order, values already canonical.
    content = (
        '{"payload":'
        + ("null" if payload is None else json_text(payload, "payload"))
        + ',"trigger":'
        + (trigger_text or json_text(receipt.trigger, "trigger"))
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
            "evaluated_at": receipt.evaluated_at,
            "outcome": receipt.outcome.value,
            "reason": receipt.reason.value,
            "evidence_digest": receipt.evidence_digest,
            "trigger": None,
            "trigger_key": receipt.trigger_key,
            "observed_at": receipt.observed_at,
            "position": receipt.position,
            "authorized": receipt.authorized,
            "authorization": receipt.authorization,
            "budget": None if budget is None else budget.value,
            "tool_error": None if tool_error is None else tool_error.value,
            "payload": None,
            "delivery_key": receipt.delivery_key,
            "note": receipt.note,
            "sealed": seal_text(sealer, owner, aad, content),
            "retain_until": retain_until,
        },
    )


def decode_receipt(codec: Codec, sealer: Sealer, data: bytes) -> tuple[Receipt, str]:
    """The receipt (``erased`` when its key is gone) and the source id it was evaluated on;
    anything that does not make a valid receipt is a :class:`SerdeError`."""
    value = decoded(codec, RECEIPT, data)
    sealed = value.pop("sealed", None)
    source_id = value.pop("source_id")
    opened = None  # no sealed field: never written so, and plaintext would be a downgrade
    if sealed is not None:
        aad = receipt_identity(
            value["tenant_id"],
            value["user_id"],
            value["watcher_id"],
            value["watcher_version"],
            value["trigger_key"],
            value["evaluated_at"],
        )
        opened = open_fields(sealer, aad, sealed)
    erased = opened is None
    trigger = {} if opened is None else opened.get("trigger") or {}
    payload = None if opened is None else opened.get("payload")
    try:
        return _receipt(value, trigger, payload, erased), source_id
    except (KeyError, TypeError, ValueError) as exc:
        raise SerdeError(f"receipt is not valid: {str(exc)[:300]}") from None


def _receipt(value: dict[str, Any], trigger: Any, payload: Any, erased: bool) -> Receipt:
    if payload is not None and not isinstance(payload, dict):
        raise SerdeError("payload is not an object")
    budget, tool_error = value["budget"], value["tool_error"]
    return Receipt(
        tenant_id=value["tenant_id"],
        user_id=value["user_id"],
        watcher_id=value["watcher_id"],
        watcher_version=value["watcher_version"],
        evaluated_at=value["evaluated_at"],
        evidence_digest=value["evidence_digest"],
        trigger=string_map(trigger, "trigger"),
        trigger_key=value["trigger_key"],
        observed_at=value["observed_at"],
        position=value["position"],
        outcome=Outcome(value["outcome"]),
        reason=Reason(value["reason"]),
        authorized=value["authorized"],
        authorization=value["authorization"],
        budget=None if budget is None else BudgetVerdict(budget),
        tool_error=None if tool_error is None else ErrorCode(tool_error),
        payload=payload,
        delivery_key=value["delivery_key"],
        note=value["note"],
        erased=erased,
        retain_until=value.get("retain_until"),
    )
