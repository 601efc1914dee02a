"""What every record module shares: the :class:`Codec` it writes through, and the conversions Avro
values need (instants stay ``datetime``; durations travel as microseconds; JSON bodies as RFC
8785 canonical text).

The codec is a protocol so that this layer imports nothing but the rules; the Kafka layer's
:class:`~pipeline.kafka.serde.AvroCodec` satisfies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from pipeline.rules.bounds import MAX_JSON_INT
from pipeline.rules.bounds import parse_json as bounded_json
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.keys import canonical_json

__all__ = [
    "MAX_JSON_BYTES",
    "Codec",
    "decoded",
    "json_text",
    "parse_json",
    "string_map",
    "strings",
]

MAX_JSON_BYTES: Final = 1024 * 1024
"""The largest JSON body a record carries (Kafka's default record size)."""


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


def parse_json(
    text: str,
    field: str,
    *,
    max_bytes: int = MAX_JSON_BYTES,
    max_int: int = MAX_JSON_INT,
) -> Any:
    """A JSON body read back within the bounds of DESIGN.md §10 (size, nesting, integers, no
    NaN); anything else is an undecodable record (:class:`SerdeError` naming ``field``)."""
    if not isinstance(text, str | bytes):
        raise SerdeError(f"{field} is not JSON text")
    try:
        return bounded_json(text, field, max_bytes=max_bytes, max_int=max_int)
    except DefinitionError as exc:
        raise SerdeError(f"{field}: {exc.message}") from None


def string_map(value: Any, field: str) -> dict[str, str]:
    """``value`` if it is an object of strings (a trigger read back), else :class:`SerdeError`."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise SerdeError(f"{field} is not an object of strings")
    return value


def strings(value: Any, field: str) -> tuple[str, ...] | None:
    """``value`` (a list of strings, or null) as a tuple, else :class:`SerdeError`."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise SerdeError(f"{field} is not a list of strings")
    return tuple(value)
