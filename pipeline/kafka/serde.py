"""Record values as Avro single-object encoding, with every shipped schema version known (DESIGN.md
§2, §10).

Owns :class:`AvroCodec` and :func:`default_codec`: ``C3 01``, the writer schema's CRC-64-AVRO
fingerprint, then the body; read into the newest version of its type, so old records stay
readable without a registry server. Undecodable bytes raise :class:`SerdeError`, an unknown
fingerprint :class:`UnknownSchemaError`. Leaves out which schema a topic carries (callers).
"""

from __future__ import annotations

import functools
import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from pipeline.kafka.writers import Reader, Writer, native_reader, prepare
from pipeline.rules.errors import SerdeError, UnknownSchemaError

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "AvroCodec",
    "SchemaVersion",
    "default_codec",
    "fingerprint_of",
]

MAGIC: Final = b"\xc3\x01"
HEADER_SIZE: Final = 10  # magic + 8-byte fingerprint
_FILE_NAME = re.compile(r"^(?P<type>[a-z][a-z0-9_-]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")
_NAMESPACE = "vigil."


def fingerprint_of(parsed_schema: Any) -> bytes:
    """The 8 fingerprint bytes of a parsed schema, in single-object order (little-endian)."""
    # fastavro returns the CRC-64-AVRO value already as little-endian hex, as Java does.
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed_schema), "CRC-64-AVRO"))


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One shipped ``.avsc`` file, parsed."""

    record_type: str  # "event", from the file name
    version: int
    name: str  # the Avro full name, "vigil.Event"
    fingerprint: bytes
    parsed: Any  # fastavro's parsed schema
    source: str  # the file name
    writer: Writer | None = None  # the prepared writer (``pipeline.kafka.writers``), if any
    native_read: Reader | None = None  # the native path's reader of this schema, if any

    @property
    def header(self) -> bytes:
        return MAGIC + self.fingerprint


class AvroCodec:
    """The Avro codec: every schema version this build ships, indexed by type and by
    fingerprint; it encodes a named record type's value and decodes any known version.

    A reader finds the writer schema by fingerprint among all ``schemas/<type>.v<N>.avsc`` files and
    reads into the newest version of that type (Avro schema resolution). A schema's values are
    written by its prepared writer (``pipeline.kafka.writers``) and by fastavro when it has none or
    declines a value. An :class:`UnknownSchemaError` carries the fingerprint, and the caller asks
    the ``schemas`` topic (``pipeline.kafka.schema_catalog``). The Confluent Schema Registry wire
    format is not spoken.
    """

    __slots__ = ("_by_fingerprint", "_newest")

    def __init__(self, versions: Iterable[SchemaVersion]) -> None:
        self._by_fingerprint: dict[bytes, SchemaVersion] = {}
        self._newest: dict[str, SchemaVersion] = {}
        for version in versions:
            clash = self._by_fingerprint.get(version.fingerprint)
            if clash is not None:
                raise SerdeError(
                    f"{version.source} and {clash.source} have the same canonical form "
                    "(a new version must change fields, not only defaults or docs)"
                )
            self._by_fingerprint[version.fingerprint] = version
            newest = self._newest.get(version.record_type)
            if newest is not None and newest.name != version.name:
                raise SerdeError(f"{version.source}: named {version.name}, not {newest.name}")
            if newest is None or version.version > newest.version:
                self._newest[version.record_type] = version

    @classmethod
    def from_documents(cls, documents: Mapping[str, Mapping[str, Any]]) -> AvroCodec:
        """Build from ``{file name: schema JSON}``; the file name gives type and version."""
        return cls(_parse(name, doc) for name, doc in documents.items())

    @classmethod
    def from_package(cls, package: str = "schemas") -> AvroCodec:
        """Load every ``*.avsc`` shipped in ``package`` (old versions included)."""
        documents = {
            entry.name: json.loads(entry.read_text(encoding="utf-8"))
            for entry in resources.files(package).iterdir()
            if entry.name.endswith(".avsc")
        }
        return cls.from_documents(documents)

    @property
    def record_types(self) -> frozenset[str]:
        return frozenset(self._newest)

    @property
    def versions(self) -> tuple[SchemaVersion, ...]:
        return tuple(self._by_fingerprint.values())

    def newest(self, record_type: str) -> SchemaVersion:
        try:
            return self._newest[record_type]
        except KeyError:
            raise SerdeError(f"no schema for record type {record_type!r}") from None

    def encode(self, record_type: str, value: Mapping[str, Any]) -> bytes:
        """``value`` written with the newest schema of ``record_type``."""
        schema = self.newest(record_type)
        if schema.writer is not None:
            out = bytearray(schema.header)
            try:
                schema.writer(value, out)
                return bytes(out)
            except Exception:  # not written the plain way: fastavro decides below
                pass
        buffer = io.BytesIO()
        buffer.write(schema.header)
        try:
            schemaless_writer(buffer, schema.parsed, value, strict_allow_default=True)
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
            raise SerdeError(f"cannot encode {record_type!r} with {schema.source}: {exc}") from exc
        return buffer.getvalue()

    def writer_of(self, data: bytes) -> SchemaVersion:
        """The schema that wrote ``data``, from its header alone."""
        if len(data) < HEADER_SIZE:
            raise SerdeError(f"too short for a vigil record: {len(data)} bytes")
        if data[:2] != MAGIC:
            raise SerdeError(f"not Avro single-object encoding: starts with {data[:2].hex()}")
        key = bytes(data[2:HEADER_SIZE])
        writer = self._by_fingerprint.get(key)
        if writer is None:
            raise UnknownSchemaError(f"unknown schema fingerprint {key.hex()}", key)
        return writer

    def decode(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """``(record type, value)``, read into the newest schema of the writer's type."""
        writer = self.writer_of(data)
        reader = self._newest[writer.record_type]
        if reader is writer and writer.native_read is not None:
            found = writer.native_read(data, HEADER_SIZE)  # None: fastavro reads it below
            if found is not None:
                return writer.record_type, found
        body = io.BytesIO(data)
        body.seek(HEADER_SIZE)
        try:
            value = schemaless_reader(
                body, writer.parsed, None if reader is writer else reader.parsed
            )
        # Untrusted bytes can fail inside fastavro in many ways; each means "undecodable".
        except Exception as exc:
            raise SerdeError(
                f"undecodable {writer.record_type} body ({writer.source}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if body.tell() != len(data):
            raise SerdeError(
                f"trailing bytes after a {writer.record_type} body: "
                f"{len(data) - body.tell()} of {len(data)}"
            )
        if not isinstance(value, dict):
            raise SerdeError(f"{writer.source} does not describe a record")
        return writer.record_type, value


def _parse(file_name: str, document: Mapping[str, Any]) -> SchemaVersion:
    match = _FILE_NAME.match(file_name)
    if match is None:
        raise SerdeError(f"{file_name}: schema files are named <type>.v<N>.avsc")
    try:
        parsed = parse_schema(dict(document), named_schemas={})
    except Exception as exc:  # fastavro raises several types for a bad schema
        raise SerdeError(f"{file_name}: not a valid Avro schema: {exc}") from exc
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise SerdeError(f"{file_name}: must be a record named vigil.<RecordType>")
    name = str(parsed.get("name", ""))
    if not name.startswith(_NAMESPACE):
        raise SerdeError(f"{file_name}: must be a record named vigil.<RecordType>")
    return SchemaVersion(
        record_type=match["type"],
        version=int(match["version"]),
        name=name,
        fingerprint=fingerprint_of(parsed),
        parsed=parsed,
        source=file_name,
        writer=(writer := prepare(parsed)),
        native_read=native_reader(writer),
    )


@functools.cache
def default_codec() -> AvroCodec:
    """The schemas shipped with this build, parsed once per process."""
    return AvroCodec.from_package()
