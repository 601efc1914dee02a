"""What every record module shares: the :class:`Codec` it writes through, and the small
conversions Avro values need (instants stay ``datetime``; durations travel as microseconds;
JSON bodies as RFC 8785 canonical text).

A record module maps a rules model to and from an Avro value and asks a :class:`Codec` for the
bytes. The codec is a protocol so that this layer imports nothing but the rules: the Kafka
layer's :class:`~pipeline.kafka.serde.SchemaRegistry` (Avro single-object encoding) satisfies it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final, Protocol

from pipeline.rules.errors import SerdeError
from pipeline.rules.keys import canonical_json

__all__ = ["MICRO", "Codec", "decoded", "json_text", "micros", "parse_json"]

MICRO: Final = timedelta(microseconds=1)


class Codec(Protocol):
    """Bytes for a value of a named record type, and back (the newest schema of its type)."""

    def encode(self, record_type: str, value: Mapping[str, Any]) -> bytes: ...

    def decode(self, data: bytes) -> tuple[str, dict[str, Any]]: ...


def decoded(codec: Codec, record_type: str, data: bytes) -> dict[str, Any]:
    """The value of ``data``, which must be a ``record_type`` record (else :class:`SerdeError`)."""
    found, value = codec.decode(data)
    if found != record_type:
        raise SerdeError(f"expected a {record_type} record, got {found}")
    return value


def json_text(value: Any, field: str = "value") -> str:
    """``value`` as RFC 8785 canonical JSON text (how records carry JSON bodies)."""
    return canonical_json(value, field).decode("utf-8")


def parse_json(text: str, field: str) -> Any:
    """A JSON body read back; text that is not JSON is an undecodable record."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerdeError(f"{field} is not JSON: {str(exc)[:200]}") from None


def micros(value: timedelta) -> int:
    """A duration as whole microseconds (Avro ``long``)."""
    return value // MICRO
