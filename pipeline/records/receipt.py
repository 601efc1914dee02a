"""The ``receipt`` record (``schemas/receipt.v1.avsc``): the privacy-filtered record of one
evaluation (DESIGN §10, §11). The evaluator's hot loop encodes straight from
``Evaluation.receipt_fields`` (the same bytes, no model built)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pipeline.records.codec import Codec, decoded, json_text, parse_json
from pipeline.rules.receipts import Receipt

__all__ = ["RECEIPT", "decode_receipt", "encode_receipt"]

RECEIPT: Final = "receipt"


def encode_receipt(
    codec: Codec,
    receipt: Receipt | Mapping[str, Any],
    source_id: str,
    trigger_text: str | None = None,
) -> bytes:
    """A receipt, or its fields as ``Evaluation.receipt_fields`` holds them. ``trigger_text``
    is the trigger's JSON when the caller has it."""
    fields = receipt if isinstance(receipt, dict) else dict(receipt)
    budget = fields["budget"]
    tool_error = fields["tool_error"]
    payload = fields["payload"]
    return codec.encode(
        RECEIPT,
        {
            "tenant_id": fields["tenant_id"],
            "user_id": fields["user_id"],
            "watcher_id": fields["watcher_id"],
            "watcher_version": fields["watcher_version"],
            "source_id": source_id,
            "evaluated_at": fields["evaluated_at"],
            "outcome": fields["outcome"].value,
            "reason": fields["reason"].value,
            "evidence_digest": fields["evidence_digest"],
            "trigger": trigger_text or json_text(fields["trigger"], "trigger"),
            "trigger_key": fields["trigger_key"],
            "observed_at": fields["observed_at"],
            "position": fields["position"],
            "authorized": fields["authorized"],
            "authorization": fields["authorization"],
            "budget": None if budget is None else budget.value,
            "tool_error": None if tool_error is None else tool_error.value,
            "payload": None if payload is None else json_text(payload, "payload"),
            "delivery_key": fields["delivery_key"],
            "note": fields["note"],
        },
    )


def decode_receipt(codec: Codec, data: bytes) -> tuple[Receipt, str]:
    """The receipt and the source id it was evaluated on."""
    value = decoded(codec, RECEIPT, data)
    fields = {k: v for k, v in value.items() if k != "source_id"}
    fields["trigger"] = parse_json(value["trigger"], "trigger")
    fields["payload"] = (
        None if value["payload"] is None else parse_json(value["payload"], "payload")
    )
    return Receipt.model_validate(fields), value["source_id"]
