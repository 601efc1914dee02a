"""Delivery key v1, derived keys, evidence digest v1, canonical JSON and record keys."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import parse_instant
from pipeline.rules.keys import (
    EVIDENCE_FIELDS,
    EventTrigger,
    InstantTrigger,
    RequestTrigger,
    Trigger,
    canonical_json,
    delivery_key,
    derived_delivery_key,
    encode_fields,
    evidence_digest,
    evidence_digest_of,
    parse_subject_key,
    parse_watcher_key,
    request_delivery_key,
    subject_key,
    trigger_fields,
    watcher_key,
)
from tests.vectors import VECTORS

pytestmark = pytest.mark.unit

_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)


def _trigger(kind: str, rest: list[str]) -> Trigger:
    if kind == "event":
        return EventTrigger(event_type=rest[0], event_id=rest[1])
    if kind == "request":
        return RequestTrigger(request_id=rest[0])
    assert kind in ("poll", "schedule")
    return InstantTrigger(kind=kind, scheduled_at=parse_instant(rest[0]))  # type: ignore[arg-type]


def _key_from_vector_fields(fields: list[str]) -> str:
    tenant, user, watcher, version, source, kind, *rest = fields
    return delivery_key(
        tenant_id=tenant,
        user_id=user,
        watcher_id=watcher,
        watcher_version=int(version),
        source_id=source,
        trigger=_trigger(kind, rest),
    )


@pytest.mark.parametrize(
    "vector", VECTORS["delivery_key_v1"], ids=lambda v: "-".join(v["fields"][:2] + v["fields"][5:6])
)
def test_delivery_key_from_vector_fields_matches_reference_key(vector: dict[str, Any]) -> None:
    assert _key_from_vector_fields(vector["fields"]) == vector["key"]


@pytest.mark.parametrize("vector", VECTORS["delivery_key_v1"])
def test_delivery_key_vectors_hash_the_v1_prefix_then_the_listed_fields(
    vector: dict[str, Any],
) -> None:
    encoded = encode_fields(["vigil.delivery.v1", *vector["fields"]])
    assert hashlib.sha256(encoded).hexdigest() == vector["key"]


def test_request_delivery_key_of_send_matches_reference_vector() -> None:
    (vector,) = [v for v in VECTORS["delivery_key_v1"] if v["fields"][5] == "request"]
    tenant, user, watcher, _, _, _, request_id = vector["fields"]
    key = request_delivery_key(
        tenant_id=tenant, user_id=user, verb=watcher.removeprefix("verb:"), request_id=request_id
    )
    assert key == vector["key"]


def test_encode_fields_of_design_example_is_length_prefixed_utf8() -> None:
    assert encode_fields(["a", "bc"]) == bytes.fromhex("00000001 61 00000002 6263")
    assert encode_fields(["ü"]) == bytes.fromhex("00000002 c3bc")
    assert encode_fields([]) == b""


def test_encode_fields_with_lone_surrogate_raises_definition_error() -> None:
    with pytest.raises(DefinitionError) as info:
        encode_fields(["ok", "\ud800"])
    assert info.value.field == "fields[1]"


def _event_key(tenant: str = "acme", user: str = "u-42", event_id: str = "b-981") -> str:
    return delivery_key(
        tenant_id=tenant,
        user_id=user,
        watcher_id="w",
        watcher_version=1,
        source_id="ci.pipeline",
        trigger=EventTrigger("build.finished", event_id),
    )


def test_delivery_key_for_two_subjects_with_same_watcher_differs() -> None:
    assert _event_key(user="alice") != _event_key(user="bob")
    assert _event_key(tenant="t1") != _event_key(tenant="t2")


def test_delivery_key_fields_cannot_be_shifted_between_positions() -> None:
    # Without length prefixes "ab"+"c" and "a"+"bc" would collide.
    assert _event_key(tenant="ab", user="c") != _event_key(tenant="a", user="bc")


def test_delivery_key_takes_only_trigger_identity_so_envelope_never_changes_it() -> None:
    params = set(inspect.signature(delivery_key).parameters)
    assert params == {
        "tenant_id",
        "user_id",
        "watcher_id",
        "watcher_version",
        "source_id",
        "trigger",
    }
    assert {f.name for f in dataclasses.fields(EventTrigger)} == {"event_type", "event_id"}
    first = _evidence(envelope_id="env-1", cursor="1", observed_at="2026-11-29T12:00:00.000000Z")
    second = _evidence(
        envelope_id="env-2",
        cursor="2",
        observed_at="2026-11-29T12:05:00.000000Z",
        payload={"status": "ok"},
    )
    # Same (event_type, event_id): one key, though the evidence digests differ.
    assert evidence_digest(first) != evidence_digest(second)
    keys = {_event_key(event_id=str(e["event_id"])) for e in (first, second)}
    assert len(keys) == 1


def test_delivery_key_of_instant_trigger_uses_whole_utc_seconds() -> None:
    utc_instant = datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
    local = utc_instant.astimezone(timezone(timedelta(hours=-4)))
    with_micros = utc_instant + timedelta(microseconds=250_000)
    fields = {trigger_fields(InstantTrigger("poll", t)) for t in (utc_instant, local, with_micros)}
    assert fields == {("poll", "2026-11-01T05:30:00Z")}


def test_poll_and_schedule_at_same_instant_have_distinct_keys() -> None:
    instant = datetime(2026, 12, 1, 8, tzinfo=UTC)
    keys = {
        delivery_key(
            tenant_id="t",
            user_id="u",
            watcher_id="w",
            watcher_version=1,
            source_id="s",
            trigger=InstantTrigger(kind, instant),
        )
        for kind in ("poll", "schedule")
    }
    assert len(keys) == 2


def test_instant_trigger_with_naive_datetime_or_bad_kind_raises() -> None:
    with pytest.raises(DefinitionError):
        InstantTrigger("poll", datetime(2026, 1, 1))
    with pytest.raises(DefinitionError):
        InstantTrigger("event", datetime(2026, 1, 1, tzinfo=UTC))  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [-1, True, 1.0, "1"])
def test_delivery_key_with_invalid_version_raises_naming_field(version: Any) -> None:
    with pytest.raises(DefinitionError) as info:
        delivery_key(
            tenant_id="t",
            user_id="u",
            watcher_id="w",
            watcher_version=version,
            source_id="s",
            trigger=RequestTrigger("r"),
        )
    assert info.value.field == "watcher_version"


def test_derived_delivery_key_is_deterministic_and_distinct_per_step() -> None:
    parent = _event_key()
    send = derived_delivery_key(parent, "send")
    assert send == derived_delivery_key(parent, "send")
    assert send != derived_delivery_key(parent, "wake")
    assert send not in (parent, derived_delivery_key(_event_key(event_id="other"), "send"))
    expected = hashlib.sha256(encode_fields(["vigil.derived.v1", parent, "send"])).hexdigest()
    assert send == expected


@pytest.mark.parametrize(
    ("parent", "step", "field"),
    [("ABC", "send", "parent_key"), ("0" * 63, "send", "parent_key"), ("0" * 64, "", "step")],
)
def test_derived_delivery_key_with_bad_input_raises_naming_field(
    parent: str, step: str, field: str
) -> None:
    with pytest.raises(DefinitionError) as info:
        derived_delivery_key(parent, step)
    assert info.value.field == field


def _evidence(**overrides: Any) -> dict[str, Any]:
    (vector,) = VECTORS["evidence_digest_v1"]
    return {**vector["evidence"], **overrides}


def test_evidence_digest_of_reference_vector_matches_canonical_json_and_digest() -> None:
    (vector,) = VECTORS["evidence_digest_v1"]
    assert canonical_json(vector["evidence"]).decode("utf-8") == vector["canonical_json"]
    assert evidence_digest(vector["evidence"]) == vector["digest"]


_ODD_CHARACTERS = (  # lone surrogates, U+E000..U+FFFF and astral: where key orders differ
    st.characters(categories=["Cs"])
    | st.characters(min_codepoint=0xE000, max_codepoint=0xFFFF)
    | st.characters(min_codepoint=0x10000)
)
_ANY_TEXT = st.text(max_size=12) | st.text(_ODD_CHARACTERS, max_size=4)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.floats() | _ANY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ANY_TEXT, inner, max_size=3),
    max_leaves=8,
)


def test_evidence_digest_of_the_fields_reproduces_the_vector() -> None:
    (vector,) = VECTORS["evidence_digest_v1"]
    fields = vector["evidence"]
    assert evidence_digest_of(**fields) == vector["digest"]


@given(
    fields=st.fixed_dictionaries(
        {name: st.none() | _ANY_TEXT for name in sorted(EVIDENCE_FIELDS - {"payload"})},
    ),
    payload=st.dictionaries(_ANY_TEXT, _JSON, max_size=4),
)
def test_evidence_digest_of_the_fields_is_the_digest_of_the_mapping(
    fields: dict[str, Any], payload: dict[str, Any]
) -> None:
    """Same digest, or the same refusal, as the mapping's (floats, astral keys, lone
    surrogates, unsafe integers included)."""
    evidence = {**fields, "payload": payload}
    try:
        expected = evidence_digest(evidence)
    except DefinitionError:
        with pytest.raises(DefinitionError):
            evidence_digest_of(**evidence)
        return
    assert evidence_digest_of(**evidence) == expected


def test_evidence_digest_accepts_datetimes_as_rfc3339_micros() -> None:
    (vector,) = VECTORS["evidence_digest_v1"]
    observed = datetime(2026, 11, 29, 13, 0, tzinfo=timezone(timedelta(hours=1)))
    assert evidence_digest(_evidence(observed_at=observed)) == vector["digest"]


def test_evidence_digest_changes_with_any_field() -> None:
    base = evidence_digest(_evidence())
    for name in sorted(EVIDENCE_FIELDS):
        assert evidence_digest(_evidence(**{name: "changed"})) != base, name


def test_evidence_digest_with_missing_field_raises_naming_it() -> None:
    evidence = _evidence()
    del evidence["cursor"]
    with pytest.raises(DefinitionError) as info:
        evidence_digest(evidence)
    assert info.value.field == "evidence.cursor"


def test_evidence_digest_with_extra_field_raises_naming_it() -> None:
    with pytest.raises(DefinitionError) as info:
        evidence_digest(_evidence(tenant_id="acme"))
    assert info.value.field == "evidence.tenant_id"


def test_evidence_digest_with_nan_in_payload_raises() -> None:
    with pytest.raises(DefinitionError):
        evidence_digest(_evidence(payload={"x": math.nan}))


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        -math.inf,
        2**53,
        -(2**53),
        {1: "non-string key"},
        {"a": {1, 2}},
        b"bytes",
        datetime(2026, 1, 1, tzinfo=UTC),
        "\udc80",
    ],
    ids=repr,
)
def test_canonical_json_of_non_json_value_raises_definition_error(value: Any) -> None:
    with pytest.raises(DefinitionError):
        canonical_json(value)


def test_canonical_json_of_very_deep_nesting_raises_definition_error() -> None:
    value: Any = []
    for _ in range(5000):
        value = [value]
    with pytest.raises(DefinitionError):
        canonical_json(value)


def test_canonical_json_sorts_keys_and_normalizes_numbers() -> None:
    assert canonical_json({"b": 1.0, "a": [True, None, 2**53 - 1]}) == (
        b'{"a":[true,null,9007199254740991],"b":1}'
    )


def test_subject_and_watcher_keys_are_rfc8785_arrays() -> None:
    assert subject_key("acme", "u-42") == '["acme","u-42"]'
    assert watcher_key("acme", "u-42", "w") == '["acme","u-42","w"]'


def test_subject_key_with_quote_in_id_cannot_forge_another_subject() -> None:
    forged = subject_key('a","b', "c")
    assert forged != subject_key("a", 'b","c')
    assert parse_subject_key(forged) == ('a","b', "c")


@given(tenant=_TEXT, user=_TEXT, watcher=_TEXT)
def test_record_keys_round_trip_for_any_unicode(tenant: str, user: str, watcher: str) -> None:
    assert parse_subject_key(subject_key(tenant, user)) == (tenant, user)
    assert parse_watcher_key(watcher_key(tenant, user, watcher)) == (tenant, user, watcher)


@pytest.mark.parametrize(
    "text",
    ['["a", "b"]', '["a"]', '["a","b","c"]', '["a",1]', '{"a":"b"}', "not json", '["\\u0061","b"]'],
)
def test_parse_subject_key_of_malformed_or_noncanonical_text_raises(text: str) -> None:
    with pytest.raises(DefinitionError) as info:
        parse_subject_key(text)
    assert info.value.field == "subject_key"


def test_parse_watcher_key_of_subject_key_raises() -> None:
    with pytest.raises(DefinitionError) as info:
        parse_watcher_key(subject_key("a", "b"))
    assert info.value.field == "watcher_key"
