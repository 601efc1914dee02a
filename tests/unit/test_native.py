"""The native hot path gives the Python rules' answers byte for byte (DESIGN.md §10 "Compiled
hot path"): each piece of ``vigil_native`` against the pure-Python path it replaces, on valid
and hostile values (deep nesting, large documents, integers past 2^53, non-finite floats, lone
surrogates as invalid UTF-8 decodes to them), ``vectors.json`` through both paths, and an
evaluation's typed ``Receipt`` and ``OutboxEntry``: the same records, written to the same bytes."""

from __future__ import annotations

import hashlib
import io
import os
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from fastavro import schemaless_reader
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.crypto import KeyEncryptionKeys, KeyRing, generate_kek_text, ring
from pipeline.crypto.envelope import open_sealed
from pipeline.crypto.envelope import seal as python_seal
from pipeline.kafka import partitioner, writers
from pipeline.kafka.serde import HEADER_SIZE, AvroCodec, default_codec
from pipeline.records.outbox_entry import encode_outbox_entry
from pipeline.records.receipt import encode_receipt
from pipeline.records.watcher_state import encode_state
from pipeline.rules import condition, keys
from pipeline.rules import evidence as evidence_rules
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.condition import condition_to_json, interpret, parse_condition
from pipeline.rules.data_keys import KeyOwner, subject_owner
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.evaluation import Evaluation, evaluate, recorded_budget
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.native import NATIVE, describe, path_name
from pipeline.rules.watcher_state import WatcherState
from tests.native import needs_native, python_path
from tests.unit.consumers.evaluator.test_fast_paths import NOW, grant
from tests.unit.kafka.test_writers import NEWEST, fastavro_bytes, hostile, values
from tests.vectors import VECTORS

pytestmark = pytest.mark.unit

_ODD = st.sampled_from(['"', "\\", "\x00", "\x08", "\x1f", "\x7f", "é", "\u2028", "\ue000"])
_TEXT = st.text(
    st.characters(max_codepoint=0x7F)
    | _ODD
    | st.characters(min_codepoint=0xE000, max_codepoint=0xFFFF)
    | st.characters(min_codepoint=0x10000)
    | st.characters(categories=["Cs"]),  # lone surrogates: what invalid UTF-8 decodes to
    max_size=10,
)
_NUMBERS = (
    st.integers(-(2**53) + 1, 2**53 - 1)
    | st.integers()  # past 2^53, past 2^64
    | st.floats()  # NaN and infinities included
    | st.sampled_from([2**53, -(2**53), 1e21, 1e-7, 5e-324, -0.0, 2.0**53, 0.1])
)
_SCALARS = st.none() | st.booleans() | _NUMBERS | _TEXT
_JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_TEXT, inner, max_size=4)
    ),
    max_leaves=25,
)


def _outcome(call: Any, *args: Any) -> Any:
    """What a call gave: its value, or the type of what it raised."""
    try:
        return call(*args)
    except Exception as exc:
        return type(exc)


def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def test_the_path_is_named_in_one_line() -> None:
    line = describe()
    assert line.startswith(f"hot path: {path_name()}")
    assert "\n" not in line
    if os.environ.get("VIGIL_NATIVE") == "1":
        assert path_name() == "native"
    if os.environ.get("VIGIL_NATIVE") == "0":
        assert path_name() == "python"


# -- canonical JSON and the evidence digest ----------------------------------------------------


@needs_native
@settings(max_examples=200, deadline=None)
@given(_JSON)
def test_canonical_json_is_the_python_paths(value: Any) -> None:
    native = NATIVE.canonical_json(value)
    with python_path(keys):
        expected = _outcome(keys.canonical_json, value)
    if native is not None:  # None: the Python path writes (or refuses) it
        assert native == expected
    assert _outcome(keys.canonical_json, value) == expected


@needs_native
@pytest.mark.parametrize("depth", [1, 63, 64, 199, 200, 201, 500, 2000])
def test_deep_nesting_is_written_or_left_to_the_python_path(depth: int) -> None:
    value = _nested(depth)
    with python_path(keys):
        expected = _outcome(keys.canonical_json, value)
    assert _outcome(keys.canonical_json, value) == expected
    native = NATIVE.canonical_json(value)
    assert native is None or native == expected


@needs_native
def test_a_large_document_is_the_python_paths() -> None:
    value = {f"k{i}": [i, i / 7, "é" * (i % 5), {"x": None, "y": i % 2 == 0}] for i in range(5000)}
    with python_path(keys):
        expected = keys.canonical_json(value)
    assert NATIVE.canonical_json(value) == expected


@needs_native
@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(st.none() | _TEXT, min_size=6, max_size=6),
    observed=_TEXT,
    scheduled=st.none() | _TEXT,
    payload=_JSON,
)
def test_evidence_digest_is_the_python_paths(
    texts: list[Any], observed: str, scheduled: str | None, payload: Any
) -> None:
    args = (*texts, observed, scheduled, payload)
    with python_path(keys):
        expected = _outcome(keys.evidence_digest_of, *args)
    native = NATIVE.evidence_digest_of(*args)
    assert native is None or native == expected
    assert _outcome(keys.evidence_digest_of, *args) == expected


@needs_native
@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(EvidenceKind),
    texts=st.lists(st.none() | _TEXT.filter(bool), min_size=4, max_size=4),
    observed=st.datetimes(timezones=st.just(UTC)),
    scheduled=st.datetimes(timezones=st.just(UTC)),
    payload=st.dictionaries(_TEXT, _JSON, max_size=4),
    shifted=st.sampled_from([None, "observed_at", "scheduled_at"]),
)
def test_an_evidences_digest_is_the_python_paths(
    kind: EvidenceKind,
    texts: list[Any],
    observed: datetime,
    scheduled: datetime,
    payload: dict[str, Any],
    shifted: str | None,
) -> None:
    """``Evidence.digest`` read natively from the evidence itself: the Python path's digest,
    also for an instant held in another zone (left to the Python path, which converts it)."""
    event_type, event_id, envelope_id, cursor = texts
    evidence = Evidence(
        kind,
        "src.1",
        observed,
        event_type=event_type or "built",
        event_id=event_id or "e-1",
        envelope_id=envelope_id,
        cursor=cursor,
        scheduled_at=None if kind is EvidenceKind.EVENT else scheduled,
        payload=payload,
    )
    if shifted is not None and getattr(evidence, shifted) is not None:
        moved = getattr(evidence, shifted).astimezone(timezone(timedelta(hours=2)))
        object.__setattr__(evidence, shifted, moved)
    with python_path(evidence_rules, keys):
        expected = _outcome(evidence.digest)
    native = NATIVE.evidence_digest(evidence)
    assert native is None or native == expected
    if shifted is None or getattr(evidence, shifted) is None:
        assert type(expected) is not str or native == expected  # in UTC: written natively
    assert _outcome(evidence.digest) == expected


# -- delivery key and partition -------------------------------------------------------------------


@needs_native
@settings(max_examples=150, deadline=None)
@given(
    fields=st.lists(_TEXT | st.integers() | st.none(), max_size=8), prefix=st.binary(max_size=40)
)
def test_fields_and_delivery_keys_are_the_python_paths(fields: list[Any], prefix: bytes) -> None:
    with python_path(keys):
        expected = _outcome(keys.encode_fields, fields)
    native = NATIVE.encode_fields(fields)
    assert native is None or native == expected
    key = NATIVE.delivery_key_from(prefix, fields)
    if isinstance(expected, bytes):
        assert key == hashlib.sha256(prefix + expected).hexdigest()
    else:
        assert key is None


@needs_native
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), partitions=st.integers(1, 1000))
def test_murmur2_and_partitions_are_the_python_paths(data: bytes, partitions: int) -> None:
    assert NATIVE.murmur2(data) == partitioner.murmur2(data)
    with python_path(partitioner):
        expected = partitioner.partition_for(data, partitions)
    assert partitioner.partition_for(data, partitions) == expected


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_vectors_reproduce_through_both_paths(native: bool) -> None:
    if native and NATIVE is None:
        pytest.skip("vigil_native is not built")
    modules = () if native else (keys, partitioner)
    with python_path(*modules):
        for vector in VECTORS["delivery_key_v1"]:
            prefix = keys.encode_fields(["vigil.delivery.v1", *vector["fields"][:5]])
            if vector["fields"][5] == "event":
                trigger = keys.EventTrigger(*vector["fields"][6:8])
                assert keys.delivery_key_from(prefix, trigger) == vector["key"]
            assert (
                hashlib.sha256(
                    keys.encode_fields(["vigil.delivery.v1", *vector["fields"]])
                ).hexdigest()
                == vector["key"]
            )
        (digest,) = VECTORS["evidence_digest_v1"]
        assert keys.canonical_json(digest["evidence"]).decode() == digest["canonical_json"]
        assert keys.evidence_digest_of(**digest["evidence"]) == digest["digest"]
        for case in VECTORS["java_murmur2_partition"]:
            assert partitioner.partition_for(case["key"], 12) == case["partition_of_12"]
            assert partitioner.partition_for(case["key"], 3) == case["partition_of_3"]


# -- conditions -----------------------------------------------------------------------------------

_SEGMENTS = st.sampled_from(["a", "b", "c"])
_PATHS = st.lists(_SEGMENTS, min_size=1, max_size=3).map(".".join)
_LITERALS = (
    st.sampled_from(["", "a", "ab", "b", "1", "é", "\U0001f600"])
    | st.sampled_from([0, 1, -1, 0.0, 0.5, 1.0, 2**53 - 1, -(2**53) + 1, 9007199254740991.0])
    | st.booleans()
    | st.none()
)
_ORDERABLE = _LITERALS.filter(lambda v: type(v) in (str, int, float))
_LEAVES = st.one_of(
    st.tuples(st.sampled_from(["eq", "ne"]), _PATHS, _LITERALS).map(lambda t: {t[0]: [t[1], t[2]]}),
    st.tuples(st.sampled_from(["lt", "le", "gt", "ge"]), _PATHS, _ORDERABLE).map(
        lambda t: {t[0]: [t[1], t[2]]}
    ),
    st.tuples(_PATHS, _LITERALS.filter(lambda v: type(v) is str)).map(
        lambda t: {"contains": [t[0], t[1]]}
    ),
    _PATHS.map(lambda p: {"exists": p}),
)
_CONDITIONS = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, min_size=1, max_size=4).map(lambda cs: {"all": cs})
        | st.lists(inner, min_size=1, max_size=4).map(lambda cs: {"any": cs})
        | inner.map(lambda c: {"not": c})
    ),
    max_leaves=8,
)
_VALUES = st.recursive(
    _LITERALS | _NUMBERS | _TEXT | st.lists(_LITERALS, max_size=2),
    lambda inner: st.dictionaries(_SEGMENTS, inner, max_size=3),
    max_leaves=10,
)
_PAYLOADS = st.dictionaries(_SEGMENTS, _VALUES, max_size=3)


@needs_native
@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(raw=_CONDITIONS, payloads=st.lists(_PAYLOADS, min_size=1, max_size=4))
def test_native_conditions_answer_as_the_interpreter(raw: Any, payloads: list[Any]) -> None:
    cond = parse_condition(raw)
    compiled = NATIVE.Condition(condition_to_json(cond))
    expected = [interpret(cond, payload) for payload in payloads]
    assert [compiled(payload) for payload in payloads] == expected
    for payload, answer in zip(payloads, expected, strict=True):
        assert NATIVE.holds_each([compiled, compiled], payload) == [answer, answer]
    with python_path(condition):
        python = condition.compile_condition(cond)
    assert [python(payload) for payload in payloads] == expected


@needs_native
@pytest.mark.parametrize(
    ("raw", "payload", "expected"),
    [
        ({"eq": ["a", 1]}, {"a": 2**64 + 1}, False),  # big ints compare exactly
        ({"lt": ["a", 1]}, {"a": -(2**70)}, True),
        ({"gt": ["a", 9007199254740991.0]}, {"a": 2**53 + 1}, True),  # exactly, not as floats
        ({"eq": ["a", 9007199254740991]}, {"a": 9007199254740992.0}, False),
        ({"eq": ["a", 1]}, {"a": float("nan")}, False),
        ({"ne": ["a", 1]}, {"a": float("nan")}, True),
        ({"lt": ["a", 1]}, {"a": float("-inf")}, True),
        ({"eq": ["a", 1]}, {"a": True}, False),  # a bool is never a number
        ({"eq": ["a", "1"]}, {"a": 1}, False),  # a string never equals a number
        ({"gt": ["a", "b"]}, {"a": "\ud800"}, True),  # a lone surrogate orders by code point
        ({"lt": ["a", "\ue000"]}, {"a": "\U0001f600"}, False),
        ({"contains": ["a", "é"]}, {"a": "café"}, True),
        ({"exists": "a.b"}, {"a": {"b": None}}, True),
        ({"exists": "a.b"}, {"a": [{"b": 1}]}, False),
    ],
)
def test_native_conditions_on_hostile_values(raw: Any, payload: Any, expected: bool) -> None:
    cond = parse_condition(raw)
    assert interpret(cond, payload) is expected
    assert NATIVE.Condition(condition_to_json(cond))(payload) is expected


# -- Avro writers ---------------------------------------------------------------------------------

_REGISTRY = default_codec()
_WRITTEN = [v for v in NEWEST if v.writer is not None]


def test_native_writers_cover_the_python_writers_schemas() -> None:
    """Every shipped schema version gets a native writer exactly when it gets a Python one."""
    if NATIVE is None:
        pytest.skip("vigil_native is not built")
    for version in _REGISTRY.versions:
        with python_path(writers):
            python = writers.prepare(version.parsed)
        try:
            native = NATIVE.Writer(version.parsed, version.header)
        except ValueError:
            native = None
        assert (native is None) == (python is None), version.source


@needs_native
@pytest.mark.slow
@pytest.mark.parametrize("version", _WRITTEN, ids=lambda v: v.source)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_native_records_are_the_python_writers_bytes(version: Any, data: st.DataObject) -> None:
    """Valid values and the same with fields swapped for anything, dropped or added: the native
    writer's bytes are the Python writer's (and fastavro's), or both decline."""
    value = dict(data.draw(values(version.parsed)))
    if data.draw(st.booleans()):
        for name in data.draw(st.lists(st.sampled_from(list(value)), max_size=2)):
            value[name] = data.draw(hostile | _JSON)
    if data.draw(st.booleans()):
        value["extra"] = 1
    with python_path(writers):
        python = writers.prepare(version.parsed)
    assert python is not None
    out = bytearray(version.header)
    expected = _outcome(python, value, out)
    native = NATIVE.Writer(version.parsed, version.header)
    if expected is None:
        assert native.encode(value) == bytes(out) == fastavro_bytes(version, value)
        assert native.encode_many([value, value]) == [bytes(out)] * 2
    else:
        with pytest.raises(Exception):  # noqa: B017 - the registry hands it to fastavro
            native.encode(value)
        assert native.encode_many([value]) == [None]


def _fastavro_read(version: Any, data: bytes) -> Any:
    """What ``AvroCodec.decode`` reads with fastavro (the writer's schema, no reader's), or the
    type of what it raised; a body that does not end at the data's end is a ``ValueError``."""
    body = io.BytesIO(data)
    body.seek(HEADER_SIZE)
    try:
        value = schemaless_reader(body, version.parsed, None)
    except Exception as exc:
        return type(exc)
    return value if body.tell() == len(data) else ValueError


@needs_native
@pytest.mark.slow
@pytest.mark.parametrize("version", _WRITTEN, ids=lambda v: v.source)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_native_reads_are_fastavros(version: Any, data: st.DataObject) -> None:
    """A record's bytes read natively give fastavro's value (or are left to it: instants
    outside years 1..9999); bytes cut, extended or flipped anywhere are read as fastavro reads
    them, or left to it (always where it raises)."""
    raw = bytearray(fastavro_bytes(version, data.draw(values(version.parsed))))
    native = NATIVE.Writer(version.parsed, version.header)
    read = native.read(bytes(raw), HEADER_SIZE)
    assert read == _fastavro_read(version, bytes(raw)) or read is None  # None: fastavro's
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(HEADER_SIZE, len(raw)))
        change = data.draw(st.sampled_from(["cut", "add", "flip"]))
        if change == "cut":
            del raw[at:]
        elif change == "add":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        elif at < len(raw):
            raw[at] ^= data.draw(st.integers(1, 255))
    expected = _fastavro_read(version, bytes(raw))
    read = native.read(bytes(raw), HEADER_SIZE)
    if isinstance(expected, type):
        assert read is None, expected
    elif read is not None:
        assert read == expected


@needs_native
def test_a_codec_on_the_native_path_reads_what_fastavro_reads() -> None:
    codec = default_codec()
    version = codec.newest("event")
    assert version.native_read is not None
    value = {
        "source_id": "ci",
        "event_type": "build",
        "event_id": "e",
        "envelope_id": None,
        "cursor": None,
        "observed_at": datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        "payload": "{}",
        "tenant_id": "acme",
    }
    data = codec.encode("event", value)
    assert codec.decode(data) == ("event", value) == ("event", _fastavro_read(version, data))
    assert codec.decode(data)[1]["observed_at"].tzinfo is UTC
    with python_path(writers):
        assert AvroCodec.from_package().newest("event").native_read is None


@needs_native
def test_native_instants_in_any_zone_are_the_python_writers() -> None:
    version = _REGISTRY.newest("watcher_state")
    zones = [
        UTC,
        timezone(timedelta(hours=5, minutes=30)),
        timezone(timedelta(hours=-23, minutes=-59)),
    ]
    native = NATIVE.Writer(version.parsed, version.header)
    with python_path(writers):
        python = writers.prepare(version.parsed)
    assert python is not None
    for at in (
        datetime(1, 1, 1, 12),
        datetime(1969, 12, 31, 23, 59, 59, 999_999),
        datetime(9999, 12, 31, 12),
    ):
        for zone in zones:
            value = {
                "tenant_id": "t", "user_id": "u", "watcher_id": "w", "source_id": "s",
                "version": 1, "status": "active", "activated_at": at.replace(tzinfo=zone),
                "checkpoint": None, "recent_triggers": [], "last_outcome": None,
                "last_reason": None, "evaluations": 0, "closed_reason": None, "revision": 0,
                "holds": True, "notified_at": at.replace(tzinfo=zone),
                "updated_at": at.replace(tzinfo=zone),
            }  # fmt: skip
            assert native.encode(value) == fastavro_bytes(version, value)
    with pytest.raises(TypeError):
        native.encode({**value, "updated_at": at})  # naive: fastavro decides


# -- typed records ------------------------------------------------------------------------------

_FINITE = st.recursive(
    _LITERALS | st.integers(-(2**53) + 1, 2**53 - 1) | _TEXT,
    lambda inner: st.dictionaries(_SEGMENTS, inner, max_size=3) | st.lists(inner, max_size=2),
    max_leaves=10,
)


class _PlainSealer:
    """Seals as the associated data and plaintext themselves: deterministic, so two encodings
    of one record compare byte for byte (the cipher is held to the Python one below)."""

    def seal(self, owner: KeyOwner, aad: bytes, plaintext: bytes) -> bytes | None:
        return b"\x01" + aad + b"\x00" + plaintext

    def open(self, aad: bytes, sealed: bytes) -> bytes | None:
        return None


def _evaluated(raw: Any, payload: dict[str, Any], event_id: str) -> Evaluation:
    """One evaluation on the path the caller runs (the definition compiles its condition then)."""
    body: dict[str, Any] = {
        "watcher_id": "w",
        "purpose": "ops.alert",
        "source": {"kind": "event", "source_id": "ci", "event_type": "build", "max_age": "10m"},
        "condition": raw,
        "delivery": {"target": "ops-hook"},
        "expires_at": "2027-06-01T00:00:00Z",
        "budgets": {"window": "1h", "evaluations": 10},
        "privacy": {"retain_paths": ["a", "b.c"]},
    }
    definition = WatcherDefinition.from_json(body, tenant_id="acme", user_id="ann")
    evidence = Evidence(
        source_kind=EvidenceKind.EVENT,
        source_id="ci",
        observed_at=NOW,
        event_type="build",
        event_id=event_id,
        payload=payload,
        position="events:0:7",
    )
    state = WatcherState(version=1, status=WatcherStatus.ACTIVE)
    gate = recorded_budget(BudgetVerdict.OK)
    return evaluate(definition.with_version(1), state, evidence, [grant()], NOW, gate)


def _written(codec: AvroCodec, result: Evaluation) -> list[Any]:
    """The evaluation's receipt, outbox entry and watcher-state as the evaluator writes them."""
    sealer = _PlainSealer()
    receipt = _outcome(encode_receipt, codec, sealer, result.receipt, "ci")
    entry = (
        None
        if result.outbox is None
        else _outcome(encode_outbox_entry, codec, sealer, result.outbox)
    )
    state = _outcome(encode_state, codec, ("acme", "ann", "w"), "ci", result.next_state, NOW)
    return [receipt, entry, state]


@needs_native
@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(
    raw=_CONDITIONS,
    payload=st.dictionaries(_SEGMENTS, _FINITE, max_size=3),
    event_id=st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=8),
)
def test_typed_records_are_the_python_paths_bytes(
    raw: Any, payload: dict[str, Any], event_id: str
) -> None:
    """An evaluation on either path gives the same typed ``Receipt`` and ``OutboxEntry``, and
    the evaluator's encoders write them (and the watcher-state) to the same bytes."""
    with python_path(keys, condition, writers):
        python_codec = AvroCodec.from_package()
        python = _outcome(_evaluated, raw, payload, event_id)
        python_bytes = None if isinstance(python, type) else _written(python_codec, python)
    native = _outcome(_evaluated, raw, payload, event_id)
    if isinstance(python, type):
        assert native is python
        return
    assert native.receipt == python.receipt
    assert native.outbox == python.outbox
    assert native.next_state == python.next_state
    assert _written(default_codec(), native) == python_bytes


# -- sealing --------------------------------------------------------------------------------------


@needs_native
@settings(max_examples=200, deadline=None)
@given(
    key=st.binary(min_size=32, max_size=32),
    key_id=st.binary(min_size=16, max_size=16),
    nonce=st.binary(min_size=12, max_size=12),
    plaintext=st.binary(max_size=300),
    aad=st.binary(max_size=100),
)
def test_native_seals_are_the_python_envelopes(
    key: bytes, key_id: bytes, nonce: bytes, plaintext: bytes, aad: bytes
) -> None:
    cipher = NATIVE.Cipher(key, key_id)
    aead = AESGCM(key)
    sealed = cipher.seal(plaintext, aad, nonce)
    assert sealed == b"\x01" + key_id + nonce + aead.encrypt(nonce, plaintext, aad)
    assert open_sealed(aead, sealed, aad) == plaintext
    assert cipher.open(python_seal(aead, key_id, plaintext, aad), aad) == plaintext
    random = cipher.seal(plaintext, aad)
    assert random != cipher.seal(plaintext, aad)  # a fresh nonce each time
    assert open_sealed(aead, random, aad) == plaintext
    assert cipher.open(sealed, aad + b"x") is None
    assert cipher.open(sealed[:-1] + bytes([sealed[-1] ^ 1]), aad) is None


@needs_native
def test_a_cipher_refuses_keys_that_are_not_aes_256() -> None:
    for key, key_id in ((b"k" * 16, b"i" * 16), (b"k" * 32, b"i" * 15)):
        with pytest.raises(ValueError):
            NATIVE.Cipher(key, key_id)
    assert NATIVE.Cipher(b"k" * 32, b"i" * 16).open(b"\x01short", b"") is None


@needs_native
def test_a_key_ring_on_either_path_opens_what_the_other_sealed() -> None:
    keks = KeyEncryptionKeys.parse(generate_kek_text("k1"))
    owner = subject_owner("acme", "ann")
    native_ring = KeyRing(keks, default_codec())
    topic_key, raw = native_ring.create(owner, datetime(2026, 11, 29, tzinfo=UTC))
    with python_path(ring):
        python_ring = KeyRing(keks, default_codec())
        python_ring.apply(topic_key, raw)
        by_python = python_ring.seal(owner, b"record", b"ann's")
    by_native = native_ring.seal(owner, b"record", b"ann's too")
    assert by_python is not None and by_native is not None
    assert native_ring.open(b"record", by_python) == b"ann's"
    assert python_ring.open(b"record", by_native) == b"ann's too"
    assert native_ring.open(b"another record", by_python) is None
