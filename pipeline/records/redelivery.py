"""The ``redeliveries`` record (``schemas/redelivery.v1.avsc``): a ``redeliver`` command's
request, keyed by delivery key, written by the command processor and read by delivery.

Owns its Avro mapping to and from :class:`~pipeline.rules.commands.model.Redelivery`. Whether
the request applies is delivery's to decide (``pipeline.rules.dispatch.redeliver``).
"""

from __future__ import annotations

from typing import Final

from pipeline.records.codec import Codec, decoded
from pipeline.rules.commands.model import Redelivery
from pipeline.rules.errors import SerdeError

__all__ = ["REDELIVERY", "decode_redelivery", "encode_redelivery"]

REDELIVERY: Final = "redelivery"


def encode_redelivery(codec: Codec, request: Redelivery) -> bytes:
    return codec.encode(
        REDELIVERY,
        {
            "delivery_key": request.delivery_key,
            "tenant_id": request.tenant_id,
            "user_id": request.user_id,
            "request_id": request.request_id,
            "requested_at": request.requested_at,
        },
    )


def decode_redelivery(codec: Codec, data: bytes) -> Redelivery:
    """A ``redeliveries`` value; raises :class:`SerdeError` for anything else."""
    value = decoded(codec, REDELIVERY, data)
    try:
        return Redelivery(
            delivery_key=str(value["delivery_key"]),
            tenant_id=str(value["tenant_id"]),
            user_id=str(value["user_id"]),
            request_id=str(value["request_id"]),
            requested_at=value["requested_at"],
        )
    except KeyError as exc:
        raise SerdeError(f"redelivery record is not valid: {exc}") from exc
