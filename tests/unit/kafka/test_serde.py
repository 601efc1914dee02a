import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from fastavro import schemaless_writer
from fastavro.schema import to_parsing_canonical_form

from pipeline.kafka.serde import (
    HEADER_SIZE,
    MAGIC,
    AvroCodec,
    SchemaVersion,
    default_codec,
)
from pipeline.rules.errors import SerdeError, UnknownSchemaError

pytestmark = pytest.mark.unit

INSTANT = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)


def sample(schema: Any) -> Any:
    """A value of every field of ``schema`` (fastavro's parsed form), non-null where allowed."""
    if isinstance(schema, list):  # a union: take the first non-null branch
        return sample(next(branch for branch in schema if branch != "null"))
    if isinstance(schema, dict):
        if schema.get("logicalType") == "timestamp-micros":
            return INSTANT
        kind = schema["type"]
        if kind == "record":
            return {f["name"]: sample(f["type"]) for f in schema["fields"]}
        if kind == "enum":
            return schema["symbols"][-1]
        if kind == "array":
            return [sample(schema["items"])]
        if kind == "map":
            return {"k": sample(schema["values"])}
        return sample(kind)
    simple = {
        "string": "s-é",
        "long": 2**40,
        "int": 7,
        "boolean": True,
        "double": 0.5,
        "bytes": b"\x00\xff",
    }
    if schema not in simple:
        pytest.fail(f"extend sample() for Avro type {schema!r}")
    return simple[schema]


def crc64_avro(data: bytes) -> int:
    """The Avro specification's reference fingerprint64, written out independently."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def thing(extra_fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    fields = [{"name": "id", "type": "string"}, {"name": "n", "type": "long"}]
    fields += extra_fields or []
    return {"type": "record", "name": "Thing", "namespace": "vigil", "fields": fields}


V2_FIELD = {"name": "label", "type": "string", "default": "none"}


def test_shipped_schemas_include_event_and_tick() -> None:
    assert {"event", "tick"} <= default_codec().record_types


@pytest.mark.parametrize("version", default_codec().versions, ids=lambda v: v.source)
def test_every_shipped_schema_round_trips(version: SchemaVersion) -> None:
    registry = AvroCodec([version])
    value = sample(version.parsed)
    data = registry.encode(version.record_type, value)
    assert registry.decode(data) == (version.record_type, value)


def test_header_is_marker_then_little_endian_crc64_of_canonical_form() -> None:
    codec = default_codec()
    event = codec.newest("event")
    data = codec.encode("event", sample(event.parsed))
    canonical = to_parsing_canonical_form(event.parsed).encode()
    assert data[:2] == MAGIC == b"\xc3\x01"
    assert data[2:HEADER_SIZE] == crc64_avro(canonical).to_bytes(8, "little")
    body = io.BytesIO()
    schemaless_writer(body, event.parsed, sample(event.parsed))
    assert data[HEADER_SIZE:] == body.getvalue()


def test_instants_decode_as_aware_utc() -> None:
    codec = default_codec()
    _, value = codec.decode(codec.encode("event", sample(codec.newest("event").parsed)))
    assert value["observed_at"] == INSTANT
    assert value["observed_at"].utcoffset() is not None


def test_default_codec_is_parsed_once() -> None:
    assert default_codec() is default_codec()


def _valid_event() -> bytes:
    codec = default_codec()
    return codec.encode("event", sample(codec.newest("event").parsed))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "too short"),
        (b"\xc3\x01\x00", "too short"),
        (b"\x00" * 20, "not Avro single-object"),
        (b'{"source_id": "x"}', "not Avro single-object"),
        (_valid_event()[:-3], "undecodable"),
        (_valid_event() + b"\x00", "trailing bytes"),
        (_valid_event()[:HEADER_SIZE] + b"\xff" * 12, "undecodable"),
    ],
    ids=["empty", "short", "zeros", "json", "truncated", "trailing", "garbage-body"],
)
def test_undecodable_bytes_raise_serde_error_with_reason(data: bytes, reason: str) -> None:
    with pytest.raises(SerdeError, match=reason) as caught:
        default_codec().decode(data)
    assert not isinstance(caught.value, UnknownSchemaError)


def test_record_from_unknown_writer_raises_unknown_schema_error() -> None:
    stranger = AvroCodec.from_documents({"thing.v1.avsc": thing()})
    data = stranger.encode("thing", {"id": "a", "n": 1})
    with pytest.raises(UnknownSchemaError, match=data[2:HEADER_SIZE].hex()):
        default_codec().decode(data)


def test_v2_with_a_defaulted_field_reads_v1_data() -> None:
    old = AvroCodec.from_documents({"thing.v1.avsc": thing()})
    both = AvroCodec.from_documents({"thing.v1.avsc": thing(), "thing.v2.avsc": thing([V2_FIELD])})
    v1_data = old.encode("thing", {"id": "a", "n": 5})
    assert both.decode(v1_data) == ("thing", {"id": "a", "n": 5, "label": "none"})
    assert both.newest("thing").version == 2
    v2_data = both.encode("thing", {"id": "b", "n": 6, "label": "x"})
    assert v2_data[2:HEADER_SIZE] == both.newest("thing").fingerprint


def test_old_reader_treats_v2_data_as_a_newer_writer() -> None:
    both = AvroCodec.from_documents({"thing.v1.avsc": thing(), "thing.v2.avsc": thing([V2_FIELD])})
    old = AvroCodec.from_documents({"thing.v1.avsc": thing()})
    with pytest.raises(UnknownSchemaError):
        old.decode(both.encode("thing", {"id": "b", "n": 6, "label": "x"}))


@pytest.mark.parametrize(
    "value",
    [
        {"id": "a"},  # missing field
        {"id": "a", "n": "five"},  # wrong type
        {"id": "a", "n": 1, "extra": True},  # unknown field
    ],
)
def test_encoding_a_value_that_breaks_the_schema_raises_serde_error(value: dict[str, Any]) -> None:
    registry = AvroCodec.from_documents({"thing.v1.avsc": thing()})
    with pytest.raises(SerdeError, match="cannot encode 'thing'"):
        registry.encode("thing", value)


def test_encoding_an_unknown_record_type_raises_serde_error() -> None:
    with pytest.raises(SerdeError, match="no schema"):
        default_codec().encode("nonesuch", {})


def test_schema_file_without_version_suffix_is_refused() -> None:
    with pytest.raises(SerdeError, match=r"<type>\.v<N>\.avsc"):
        AvroCodec.from_documents({"thing.avsc": thing()})


def test_schema_outside_vigil_namespace_is_refused() -> None:
    foreign = {**thing(), "namespace": "acme"}
    with pytest.raises(SerdeError, match="vigil"):
        AvroCodec.from_documents({"thing.v1.avsc": foreign})


def test_two_versions_with_one_canonical_form_are_refused() -> None:
    doc_only = {**thing(), "doc": "only the doc changed"}
    with pytest.raises(SerdeError, match="same canonical form"):
        AvroCodec.from_documents({"thing.v1.avsc": thing(), "thing.v2.avsc": doc_only})


def test_shipped_schema_files_are_named_vigil_record_types() -> None:
    for version in default_codec().versions:
        assert version.name.startswith("vigil.")
        assert json.loads(to_parsing_canonical_form(version.parsed))["name"] == version.name
