"""The ``redeliveries`` record (``schemas/redelivery.v1.avsc``): a ``redeliver`` command's request,
keyed by delivery key, written by the command processor and read by delivery.

Owns its mapping to and from :class:`~pipeline.rules.commands.model.Redelivery` and a decoded
one's bounds (anything else is a :class:`SerdeError`, which dead-letters the record). Leaves out
whether the request applies (``pipeline.rules.dispatch.redeliver``).
"""

from __future__ import annotations

from typing import Final

from pipeline.records.codec import Codec, decoded
from pipeline.records.event import checked_instant
from pipeline.rules.bounds import bounded_text
from pipeline.rules.commands.model import Redelivery
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.keys import check_delivery_key

__all__ = ["REDELIVERY", "decode_redelivery", "encode_redelivery"]

REDELIVERY: Final = "redelivery"
_MAX_REQUEST_ID: Final = 128
_MAX_ID: Final = 256  # a subject's ids: commands bound nothing finer (the key check is exact)


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
            delivery_key=check_delivery_key(value["delivery_key"]),
            tenant_id=bounded_text(value["tenant_id"], "tenant_id", _MAX_ID),
            user_id=bounded_text(value["user_id"], "user_id", _MAX_ID),
            request_id=bounded_text(value["request_id"], "request_id", _MAX_REQUEST_ID),
            requested_at=checked_instant(value["requested_at"], "requested_at"),
        )
    except (KeyError, DefinitionError) as exc:
        raise SerdeError(f"redelivery record is not valid: {exc}") from exc
