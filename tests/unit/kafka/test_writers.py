"""The prepared Avro writers write fastavro's bytes, for every shipped schema and any value."""

import io
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kafka import writers
from pipeline.kafka.serde import SchemaVersion, default_codec
from pipeline.kafka.writers import prepare
from pipeline.rules.errors import SerdeError
from tests.native import python_path

pytestmark = pytest.mark.unit

CODEC = default_codec()
NEWEST = sorted((CODEC.newest(name) for name in CODEC.record_types), key=lambda v: v.record_type)
PREPARED = [version for version in NEWEST if version.writer is not None]
_NAMED: dict[str, Any] = {}

instants = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
)
longs = st.integers(-(2**63), 2**63 - 1)


def values(schema: Any) -> st.SearchStrategy[Any]:
    """Valid values of ``schema`` (fastavro's parsed form)."""
    if isinstance(schema, list):
        return st.one_of([values(branch) for branch in schema])
    if isinstance(schema, str):
        scalars: dict[str, st.SearchStrategy[Any]] = {
            "null": st.none(),
            "boolean": st.booleans(),
            "int": st.integers(-(2**31), 2**31 - 1),
            "long": longs,
            "string": st.text(max_size=80),
            "bytes": st.binary(max_size=80),
            "double": st.floats(allow_nan=False),
            "float": st.floats(allow_nan=False, width=32),
        }
        if schema in scalars:
            return scalars[schema]
        return st.deferred(lambda: values(_NAMED[schema]))
    kind = schema["type"]
    if schema.get("logicalType") == "timestamp-micros":
        return st.one_of(instants, longs)
    if kind == "record":
        _NAMED[schema["name"]] = schema
        return st.fixed_dictionaries({f["name"]: values(f["type"]) for f in schema["fields"]})
    if kind == "array":
        return st.lists(values(schema["items"]), max_size=4)
    if kind == "map":
        return st.dictionaries(st.text(max_size=8), values(schema["values"]), max_size=3)
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    return values(kind)


def fastavro_bytes(version: SchemaVersion, value: Any) -> bytes:
    buffer = io.BytesIO()
    buffer.write(version.header)
    schemaless_writer(buffer, version.parsed, value, strict_allow_default=True)
    return buffer.getvalue()


def test_the_hot_records_have_prepared_writers() -> None:
    for name in ("receipt", "watcher_state", "outbox_entry", "command"):
        assert CODEC.newest(name).writer is not None, name


@pytest.mark.parametrize("version", PREPARED, ids=lambda v: v.source)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_prepared_bytes_are_fastavros(version: SchemaVersion, data: st.DataObject) -> None:
    value = data.draw(values(version.parsed))
    assert version.writer is not None
    out = bytearray(version.header)
    version.writer(value, out)
    assert bytes(out) == fastavro_bytes(version, value)
    assert CODEC.encode(version.record_type, value) == bytes(out)


hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.datetimes(),
    st.lists(st.text(max_size=4), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


@pytest.mark.parametrize("version", PREPARED, ids=lambda v: v.source)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_value_encodes_as_fastavro_decides(version: SchemaVersion, data: st.DataObject) -> None:
    """A valid value with fields swapped for anything, dropped or added: the registry's bytes
    are fastavro's, or both refuse."""
    value = dict(data.draw(values(version.parsed)))
    names = list(value)
    for name in data.draw(st.lists(st.sampled_from(names), max_size=3)):
        value[name] = data.draw(hostile)
    if data.draw(st.booleans()):
        value.pop(data.draw(st.sampled_from(names)))
    if data.draw(st.booleans()):
        value["not_a_field"] = 1
    try:
        expected: bytes | None = fastavro_bytes(version, value)
    except Exception:  # fastavro refuses it in its own way
        expected = None
    if expected is None:
        with pytest.raises(SerdeError):
            CODEC.encode(version.record_type, value)
    else:
        assert CODEC.encode(version.record_type, value) == expected


def test_a_schema_with_other_types_gets_no_writer() -> None:
    parsed = {
        "type": "record",
        "name": "vigil.T",
        "fields": [{"name": "m", "type": {"type": "map", "values": "string"}}],
    }
    assert prepare(parsed) is None
    assert prepare({"type": "enum", "name": "vigil.E", "symbols": ["a"]}) is None


@pytest.mark.parametrize("size", [0, 63, 64, 1023, 1024, 70_000])
def test_lengths_on_both_sides_of_each_varint_width(size: int) -> None:
    version = CODEC.newest("watcher_state")
    value = {
        "tenant_id": "é" * size,
        "user_id": "u",
        "watcher_id": "w",
        "source_id": "s",
        "version": size,
        "status": "active",
        "activated_at": None,
        "checkpoint": None,
        "recent_triggers": ["k" * size] * 3,
        "last_outcome": None,
        "last_reason": None,
        "evaluations": -size,
        "closed_reason": None,
        "revision": 2**63 - 1 - size,
        "holds": size % 2 == 0,
        "notified_at": None,
        "updated_at": datetime(1969, 12, 31, 23, 59, 59, 999_999 - size % 7, tzinfo=UTC),
    }
    assert version.writer is not None
    out = bytearray(version.header)
    version.writer(value, out)
    assert bytes(out) == fastavro_bytes(version, value)


_AT = parse_schema(
    {
        "type": "record",
        "name": "vigil.At",
        "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "n", "type": "long"},
        ],
    }
)


def _at_bytes(value: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    schemaless_writer(buffer, _AT, value)
    return buffer.getvalue()


@settings(max_examples=200)
@given(instants, st.sampled_from([UTC, timezone(timedelta(hours=-3, minutes=-45))]), longs)
def test_an_instant_written_again_or_in_another_zone_is_the_same_bytes(
    instant: datetime, zone: timezone, n: int
) -> None:
    """Encoded instants and longs are remembered: the second write, and the same instant in
    another zone, still give fastavro's bytes; a naive instant, a bool or a float equal to a
    remembered value is never answered from memory."""
    write = prepare(_AT)
    assert write is not None
    expected = _at_bytes({"at": instant, "n": n})
    for again in (instant, instant, instant.astimezone(zone)):
        out = bytearray()
        write({"at": again, "n": n}, out)
        assert bytes(out) == expected
    with pytest.raises(TypeError):
        write({"at": instant.replace(tzinfo=None), "n": n}, bytearray())
    for alike in (float(n), n == 1):
        if alike == n:
            with pytest.raises(TypeError):
                write({"at": instant, "n": alike}, bytearray())


def test_remembered_instants_stay_bounded() -> None:
    with python_path(writers):  # the memo is the Python writers'
        write = prepare(_AT)
    assert write is not None
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(3 * writers._MEMO):
        out = bytearray()
        write({"at": start + timedelta(microseconds=i), "n": i}, out)
    assert 0 < len(writers._instants) <= writers._MEMO
    assert bytes(out) == _at_bytes({"at": start + timedelta(microseconds=i), "n": i})
