"""The key ring: sealing under an owner's key, opening by key id, shredding by tombstone, a
bounded cache, and KEK rotation (old records stay readable, new keys use the new KEK)."""

from __future__ import annotations

import base64
import logging
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.crypto.envelope import OVERHEAD
from pipeline.kafka.serde import default_codec
from pipeline.records.data_key import decode_data_key
from pipeline.rules.data_keys import KeyOwner, evidence_owner, parse_owner, subject_owner
from pipeline.rules.errors import ConfigError, DefinitionError

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, tzinfo=UTC)
K1 = "k1:" + base64.urlsafe_b64encode(b"1" * 32).decode()
K2 = "k2:" + base64.urlsafe_b64encode(b"2" * 32).decode()
ANN, BOB = subject_owner("acme", "ann"), subject_owner("acme", "bob")


def ring(text: str = K1, cache_size: int = 64) -> KeyRing:
    return KeyRing(KeyEncryptionKeys.parse(text), default_codec(), cache_size=cache_size)


def test_sealed_bytes_open_only_with_the_same_identity_and_hold_no_plaintext() -> None:
    keys = ring()
    keys.create(ANN, NOW)
    sealed = keys.seal(ANN, b"receipt|w-1|1", b"marker-plaintext")
    assert sealed is not None and b"marker-plaintext" not in sealed
    assert len(sealed) == OVERHEAD + len(b"marker-plaintext")
    assert keys.open(b"receipt|w-1|1", sealed) == b"marker-plaintext"
    assert keys.open(b"receipt|w-2|1", sealed) is None, "moved to another record"


def test_a_tombstone_shreds_the_key_and_leaves_other_owners_intact() -> None:
    keys = ring()
    keys.create(ANN, NOW)
    keys.create(BOB, NOW)
    ann = keys.seal(ANN, b"a", b"ann's")
    bob = keys.seal(BOB, b"a", b"bob's")
    assert ann is not None and bob is not None
    keys.apply(ANN.topic_key, None)
    assert keys.open(b"a", ann) is None
    assert keys.seal(ANN, b"a", b"more") is None, "nothing sealed under a shredded key"
    assert keys.open(b"a", bob) == b"bob's"


def test_a_recreated_owner_gets_a_new_key_that_never_opens_the_old_data() -> None:
    keys = ring()
    keys.create(ANN, NOW)
    old = keys.seal(ANN, b"a", b"before erasure")
    assert old is not None
    keys.apply(ANN.topic_key, None)
    keys.create(ANN, NOW)
    assert keys.open(b"a", old) is None


def test_a_reader_opens_with_keys_read_from_the_topic_records() -> None:
    writer = ring()
    topic_key, raw = writer.create(evidence_owner("acme", "ann", "w-1", 3), NOW)
    sealed = writer.seal(evidence_owner("acme", "ann", "w-1", 3), b"x", b"evidence")
    reader = ring()
    reader.apply(topic_key, raw)
    assert sealed is not None and reader.open(b"x", sealed) == b"evidence"
    record = decode_data_key(default_codec(), raw)
    assert record.kek_id == "k1" and bytes(b"1" * 32) not in raw


def test_a_keys_record_under_another_owners_key_is_ignored() -> None:
    writer = ring()
    _, raw = writer.create(ANN, NOW)
    reader = ring()
    reader.apply(BOB.topic_key, raw)
    assert reader.record(BOB) is None and reader.undecodable == 1


def test_the_unwrapped_cache_is_bounded_and_evicted_keys_unwrap_again() -> None:
    keys = ring(cache_size=2)
    owners = [subject_owner("acme", f"u-{n}") for n in range(5)]
    for owner in owners:
        keys.create(owner, NOW)
    sealed = [keys.seal(o, b"a", o.user_id.encode()) for o in owners]
    assert len(keys._raw) <= 2 and len(keys._aeads) <= 2 and len(keys._sealing) <= 2
    for owner, value in zip(owners, sealed, strict=True):
        assert value is not None and keys.open(b"a", value) == owner.user_id.encode()


def test_kek_rotation_keeps_old_records_readable_and_wraps_new_keys_under_the_new_kek() -> None:
    before = ring(K1)
    topic_key, raw = before.create(ANN, NOW)
    old = before.seal(ANN, b"a", b"sealed under k1's wrap")
    after = ring(f"{K1},{K2}")
    after.apply(topic_key, raw)
    assert old is not None and after.open(b"a", old) == b"sealed under k1's wrap"
    _, bob_raw = after.create(BOB, NOW)
    assert decode_data_key(default_codec(), bob_raw).kek_id == "k2"
    renewed = after.rewrapped(ANN)
    assert renewed is not None and renewed[0] == topic_key
    assert decode_data_key(default_codec(), renewed[1]).kek_id == "k2"
    assert after.rewrapped(ANN) is None, "already under the newest"
    assert after.older_owners("acme", "ann") == [], "rewrapped: nothing older left"
    only_k2 = ring(K2)
    only_k2.apply(*renewed)
    assert only_k2.open(b"a", old) == b"sealed under k1's wrap", "same key, same id"


def test_older_owners_are_exactly_the_subjects_keys_an_older_kek_wraps() -> None:
    before = ring(K1)
    old = [before.create(owner, NOW) for owner in (ANN, evidence_owner("acme", "ann", "w-1", 1))]
    after = ring(f"{K1},{K2}")
    for topic_key, raw in old:
        after.apply(topic_key, raw)
    after.create(evidence_owner("acme", "ann", "w-2", 1), NOW)  # under k2 already
    after.create(BOB, NOW)
    older = after.older_owners("acme", "ann")
    assert older == sorted(
        (o for o in after.owners("acme", "ann") if after.rewrapped(o) is not None),
        key=lambda o: o.topic_key,
    )
    assert {o.watcher_id for o in older} == {None, "w-1"}
    assert after.older_owners("acme", "ann") == [], "each one rewrapped, none older now"
    assert after.older_owners("acme", "bob") == []
    after.apply(old[1][0], None)  # a tombstone leaves both indexes
    assert after.older_owners("acme", "ann") == []


def test_a_key_whose_kek_is_missing_reads_as_erased_and_the_log_names_no_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer = ring(K1)
    topic_key, raw = writer.create(ANN, NOW)
    sealed = writer.seal(ANN, b"a", b"secret")
    stranger = ring(K2)
    stranger.apply(topic_key, raw)
    with caplog.at_level(logging.ERROR):
        assert sealed is not None and stranger.open(b"a", sealed) is None
    assert "'k1'" in caplog.text
    record = decode_data_key(default_codec(), raw)
    assert record.wrapped.hex() not in caplog.text
    assert base64.urlsafe_b64encode(b"1" * 32).decode() not in caplog.text


@given(st.binary(max_size=512), st.binary(max_size=64), st.integers(min_value=0))
def test_every_sealed_value_opens_and_any_flipped_byte_makes_it_unreadable(
    plaintext: bytes, aad: bytes, where: int
) -> None:
    keys = _PROPERTY_RING
    sealed = keys.seal(ANN, aad, plaintext)
    assert sealed is not None and keys.open(aad, sealed) == plaintext
    index = where % len(sealed)
    flipped = sealed[:index] + bytes([sealed[index] ^ 0x01]) + sealed[index + 1 :]
    assert keys.open(aad, flipped) is None


_PROPERTY_RING = ring()
_PROPERTY_RING.create(ANN, NOW)


@given(st.text(max_size=200))
def test_a_keys_record_key_parses_to_its_owner_or_is_refused(text: str) -> None:
    try:
        owner = parse_owner(text)
    except DefinitionError:
        return
    assert owner.topic_key == text


def test_owner_keys_are_canonical_arrays_partitioned_by_subject() -> None:
    owner = evidence_owner("acme", "ann", "w-1", 12)
    assert owner.topic_key == '["acme","ann","w-1","12"]'
    assert owner.subject_key == '["acme","ann"]' == ANN.topic_key
    assert parse_owner(owner.topic_key) == owner
    with pytest.raises(DefinitionError):
        KeyOwner("acme", "ann", "w-1")


def test_sealing_under_a_key_whose_kek_is_missing_refuses_rather_than_dropping_content() -> None:
    writer = ring(K1)
    topic_key, raw = writer.create(ANN, NOW)
    stranger = ring(K2)
    stranger.apply(topic_key, raw)
    with pytest.raises(ConfigError, match="'k1'"):
        stranger.seal(ANN, b"a", b"content")
    assert stranger.seal(BOB, b"a", b"content") is None, "no key at all: nothing to seal under"
