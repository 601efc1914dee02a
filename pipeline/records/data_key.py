"""The ``keys`` record (``schemas/data_key.v1.avsc``): one wrapped data key of a subject or of
one watcher version, keyed by its owner (DESIGN §10 "Erasure's reach"); a tombstone shreds it.

Owns :class:`DataKeyRecord` and its Avro mapping. Wrapping and unwrapping are the crypto
layer's (``pipeline.crypto``); which owner a key has is ``pipeline.rules.data_keys``'.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from pipeline.records.codec import Codec, decoded
from pipeline.rules.data_keys import KeyOwner
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.instants import utc

__all__ = ["DATA_KEY", "DataKeyRecord", "decode_data_key", "encode_data_key"]

DATA_KEY: Final = "data_key"


@dataclass(frozen=True, slots=True)
class DataKeyRecord:
    """A data key as the ``keys`` topic holds it: wrapped, never in the clear."""

    owner: KeyOwner
    key_id: bytes
    kek_id: str
    wrapped: bytes
    created_at: datetime


def encode_data_key(codec: Codec, record: DataKeyRecord) -> bytes:
    owner = record.owner
    return codec.encode(
        DATA_KEY,
        {
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "watcher_id": owner.watcher_id,
            "version": owner.version,
            "key_id": record.key_id,
            "kek_id": record.kek_id,
            "wrapped": record.wrapped,
            "created_at": utc(record.created_at),
        },
    )


def decode_data_key(codec: Codec, data: bytes) -> DataKeyRecord:
    value = decoded(codec, DATA_KEY, data)
    try:
        owner = KeyOwner(
            value["tenant_id"], value["user_id"], value["watcher_id"], value["version"]
        )
    except DefinitionError as exc:
        raise SerdeError(f"not a data key: {exc}") from None
    return DataKeyRecord(
        owner=owner,
        key_id=bytes(value["key_id"]),
        kek_id=value["kek_id"],
        wrapped=bytes(value["wrapped"]),
        created_at=utc(value["created_at"]),
    )
