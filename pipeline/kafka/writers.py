"""Prepared Avro writers: one compiled function per schema, for the records written per event.

Owns :func:`prepare`: a parsed record schema of the types vigil's hot records use turned into
straight-line Python once (``None`` for anything else); whatever it does not write the plain
way raises, and :class:`~pipeline.kafka.serde.AvroCodec` hands that value to fastavro, so the
bytes are fastavro's. On the native path a writer is ``vigil_native.Writer``, the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from pipeline.rules.instants import to_epoch_micros
from pipeline.rules.native import NATIVE

__all__ = ["Reader", "Writer", "native_reader", "prepare"]

Writer = Callable[[Mapping[str, Any], bytearray], None]
"""Appends the Avro binary encoding of a value to the buffer, or raises (see the module)."""

Reader = Callable[[bytes, int], Any]
"""The value fastavro would read from ``data[offset:]`` (ending exactly at its end), or None
where fastavro must read it: the native path's ``vigil_native.Writer.read``."""


def native_reader(writer: Writer | None) -> Reader | None:
    """On the native path, the reader of a native writer's schema (the same compiled tree, read
    the way fastavro reads it when the writer's schema is the reader's; a property holds the
    two to each other); None on the Python path."""
    if NATIVE is None or not isinstance(writer, NATIVE.Writer):
        return None
    read: Reader = writer.read
    return read


_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1
_INT_MIN: Final = -(2**31)
_INT_MAX: Final = 2**31 - 1
_SMALL: Final = tuple(bytes([n]) for n in range(128))  # one-byte varints


class _Unsupported(Exception):
    """A schema construct without a prepared form: the schema gets no writer."""


def _varint(n: int) -> bytes:
    """A zigzag-encoded non-negative integer as Avro's variable-length bytes."""
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_LENGTH: Final = tuple(_varint(n << 1) for n in range(1024))  # a string's or bytes' length


def _length(raw: bytes) -> bytes:
    return _varint(len(raw) << 1)


_MEMO: Final = 4096  # values each memo below holds; cleared whole when full
_instants: dict[datetime, bytes] = {}
"""Encoded instants by value: a batch writes the same few (its ``now``, an event's
``observed_at``, a retention's end) into every record."""
_longs: dict[int, bytes] = {}
"""Encoded longs by value (durations, budgets, counters recur per watcher); like instants."""


def _remember(memo: dict[Any, bytes], value: Any, encoded: bytes) -> bytes:
    if len(memo) >= _MEMO:
        memo.clear()
    memo[value] = encoded
    return encoded


def _instant(value: datetime) -> bytes:
    """An aware instant as ``timestamp-micros`` bytes, remembered for the next record."""
    if value.tzinfo is None:
        raise TypeError("a naive instant")  # fastavro decides
    return _remember(_instants, value, _long(to_epoch_micros(value)))


def _remembered_long(value: int) -> bytes:
    return _remember(_longs, value, _long(value))


def _long(value: int) -> bytes:
    if type(value) is not int or not _LONG_MIN <= value <= _LONG_MAX:
        raise TypeError("not a long")  # fastavro decides (bools, int subclasses, overflow)
    return _varint((value << 1) ^ (value >> 63))


def _int(value: int) -> bytes:
    if type(value) is not int or not _INT_MIN <= value <= _INT_MAX:
        raise TypeError("not an int")
    return _varint((value << 1) ^ (value >> 63))


def _bytes(value: bytes) -> bytes:
    if type(value) is not bytes:
        raise TypeError("not bytes")
    return _varint(len(value) << 1) + value


def _boolean(value: bool) -> bytes:
    if value is True:
        return b"\x01"
    if value is False:
        return b"\x00"
    raise TypeError("not a bool")


# the helpers' names; strings, longs and instants (``_micros``) are written inline
_SCALARS: Final[dict[str, str]] = {
    "boolean": "_boolean",
    "int": "_int",
    "long": "_long",
    "string": "_string",
    "bytes": "_bytes",
}


class _Source:
    """The lines of one generated function, with fresh local names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._names = 0

    def name(self) -> str:
        self._names += 1
        return f"v{self._names}"

    def add(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)


def _scalar(schema: Any) -> str | None:
    """The helper that writes ``schema``, when it is a scalar this module writes."""
    if isinstance(schema, str):
        return _SCALARS.get(schema)
    if isinstance(schema, dict) and schema.get("type") == "long":
        logical = schema.get("logicalType")
        if logical == "timestamp-micros":
            return "_micros"
        if logical is None:
            return "_long"
    if isinstance(schema, dict) and isinstance(schema.get("type"), str) and len(schema) == 1:
        return _SCALARS.get(schema["type"])
    return None


def _value(src: _Source, depth: int, schema: Any, expr: str) -> None:
    """Append the lines that write ``expr`` (a local name) as ``schema``."""
    helper = _scalar(schema)
    if helper == "_string":  # inline: the most frequent field type
        raw = src.name()
        src.add(depth, f"if type({expr}) is not str:")
        src.add(depth + 1, "raise TypeError('not a str')")
        src.add(depth, f"{raw} = {expr}.encode()")
        src.add(depth, f"out += _LENGTH[len({raw})] if len({raw}) < 1024 else _length({raw})")
        src.add(depth, f"out += {raw}")
        return
    if helper in ("_long", "_micros"):  # inline: instants and counters
        number = src.name()
        if helper == "_micros":  # an aware instant: remembered bytes (naive: _instant raises)
            src.add(depth, f"if type({expr}) is datetime:")
            src.add(depth + 1, f"out += _instants.get({expr}) or _instant({expr})")
            src.add(depth, "else:")
            depth += 1
        src.add(depth, f"{number} = {expr}")
        src.add(depth, f"if type({number}) is not int:")  # bools and floats: fastavro decides
        src.add(depth + 1, "raise TypeError('not a long')")
        src.add(depth, f"if 0 <= {number} < 64:")  # one byte
        src.add(depth + 1, f"out.append({number} << 1)")
        src.add(depth, "else:")
        src.add(depth + 1, f"out += _longs.get({number}) or _remembered_long({number})")
        return
    if helper is not None:
        src.add(depth, f"out += {helper}({expr})")
        return
    if isinstance(schema, list):
        _union(src, depth, schema, expr)
        return
    if isinstance(schema, dict) and schema.get("type") == "record":
        _record(src, depth, schema, expr)
        return
    if isinstance(schema, dict) and schema.get("type") == "array":
        item = src.name()
        src.add(depth, f"if type({expr}) is not list and type({expr}) is not tuple:")
        src.add(depth + 1, "raise TypeError('not a list')")
        src.add(depth, f"if {expr}:")
        src.add(depth + 1, f"out += _long(len({expr}))")
        src.add(depth + 1, f"for {item} in {expr}:")
        _value(src, depth + 2, schema["items"], item)
        src.add(depth, "out += b'\\x00'")
        return
    raise _Unsupported(f"no prepared form for {schema!r}")


def _union(src: _Source, depth: int, branches: list[Any], expr: str) -> None:
    """``null`` and one other type: the branch index, then the value."""
    if len(branches) != 2 or "null" not in branches:
        raise _Unsupported(f"a union other than null and one type: {branches!r}")
    null_index = branches.index("null")
    other = branches[1 - null_index]
    src.add(depth, f"if {expr} is None:")
    src.add(depth + 1, f"out += {_varint(null_index << 1)!r}")
    src.add(depth, "else:")
    src.add(depth + 1, f"out += {_varint((1 - null_index) << 1)!r}")
    _value(src, depth + 1, other, expr)


def _record(src: _Source, depth: int, schema: dict[str, Any], expr: str) -> None:
    """Every field in order; exactly the schema's fields (else fastavro decides)."""
    fields = schema["fields"]
    src.add(depth, f"if len({expr}) != {len(fields)}:")
    src.add(depth + 1, "raise KeyError('not exactly the fields of the schema')")
    for field in fields:
        name = src.name()
        src.add(depth, f"{name} = {expr}[{field['name']!r}]")
        _value(src, depth, field["type"], name)


def prepare(parsed: Any) -> Writer | None:
    """The prepared writer of a fastavro-parsed record schema; None when it uses a type this
    module does not write (fastavro writes every value of it).

    Types covered: ``null``, ``boolean``, ``int``, ``long`` (``timestamp-micros`` of an aware
    ``datetime`` included), ``string``, ``bytes``, nested records, arrays and unions of ``null``
    with one other type. A prepared writer never decides a value alone: a missing or extra field,
    another type, a naive instant or a number out of range raises, and fastavro's answer stands (a
    hypothesis property holds the bytes to fastavro's for every shipped schema). Instants and longs
    past one byte are remembered encoded, by value (bounded maps, cleared whole when full), looked
    up only after their type check, so a ``bool`` or ``float`` equal to a remembered ``int`` never
    borrows its bytes.
    """
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        return None
    if NATIVE is not None:
        try:
            native: Writer = NATIVE.Writer(parsed)
            return native
        except ValueError:  # a type it does not write: neither does the Python form
            return None
    src = _Source()
    src.add(0, "def write(value, out):")
    try:
        _record(src, 1, parsed, "value")
    except _Unsupported:
        return None
    namespace: dict[str, Any] = {
        "_boolean": _boolean,
        "_int": _int,
        "_long": _long,
        "_bytes": _bytes,
        "_LENGTH": _LENGTH,
        "_length": _length,
        "_instants": _instants,
        "_instant": _instant,
        "_longs": _longs,
        "_remembered_long": _remembered_long,
        "datetime": datetime,
        "_varint": _varint,
    }
    exec(compile("\n".join(src.lines), f"<avro writer {parsed.get('name')}>", "exec"), namespace)
    write: Writer = namespace["write"]
    return write
