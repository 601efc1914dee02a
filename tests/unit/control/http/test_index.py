"""The API's ledger index without a broker: records are filed under their own subject, each
subject keeps its newest records only, one subject's flood never pushes another's out, all
subjects together stay under the bound, tombstones and forged records are handled."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from pipeline.control.http.index import LedgerIndex
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.delivery_state import DeliveryRecord, encode_record
from pipeline.rules.dispatch import DeliveryState
from pipeline.rules.keys import subject_key
from pipeline.rules.outcomes import DeliveryStatus

pytestmark = pytest.mark.unit

TOPOLOGY = Topology("t.", 2)
CODEC = default_codec()
NOW = datetime(2026, 12, 1, tzinfo=UTC)


@dataclass
class Msg:
    _topic: str
    _key: bytes | None
    _value: bytes | None

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


def note(index: LedgerIndex, tenant: str, user: str, value: bytes) -> None:
    key = subject_key(tenant, user).encode()
    index._file(Msg(TOPOLOGY.name(Topic.NOTIFICATIONS), key, value))  # type: ignore[arg-type]


def state(index: LedgerIndex, key: str, record: DeliveryRecord | None, raw: bytes = b"") -> None:
    value = encode_record(CODEC, record) if record is not None else (raw or None)
    index._file(Msg(TOPOLOGY.name(Topic.DELIVERY_STATE), key.encode(), value))  # type: ignore[arg-type]


def record(key: str, tenant: str = "acme", user: str = "u-1", n: int = 0) -> DeliveryRecord:
    at = NOW + timedelta(seconds=n)
    return DeliveryRecord(
        DeliveryState(key, DeliveryStatus.DELIVERED, 1, at, at, at),
        tenant,
        user,
        "w-1",
        1,
        "hook",
        timedelta(days=1),
    )


def held(index: LedgerIndex, tenant: str, user: str) -> tuple[list[bytes], list[str]]:
    found = index._subjects.get(subject_key(tenant, user))
    if found is None:
        return [], []
    return list(found.notes), list(found.deliveries)


def test_a_noisy_subjects_flood_keeps_its_newest_and_never_hides_a_neighbour() -> None:
    index = LedgerIndex("127.0.0.1:1", TOPOLOGY, CODEC, per_subject=100, max_records=10_000)
    note(index, "acme", "u-1", b"neighbour")
    state(index, "k" * 64, record("k" * 64))
    for n in range(10_001):
        note(index, "globex", "noisy", b"n-%d" % n)
        state(index, f"{n:064x}", record(f"{n:064x}", "globex", "noisy", n))
    notes, keys = held(index, "globex", "noisy")
    assert len(notes) == 100 and notes[-1] == b"n-10000" and notes[0] == b"n-9901"
    assert len(keys) == 100 and keys[-1] == f"{10_000:064x}"
    assert held(index, "acme", "u-1") == ([b"neighbour"], ["k" * 64])


def test_all_subjects_together_stay_under_the_bound_forgetting_the_least_recently_written() -> None:
    index = LedgerIndex("127.0.0.1:1", TOPOLOGY, CODEC, per_subject=10, max_records=50)
    for n in range(20):
        for _ in range(10):
            note(index, "acme", f"u-{n}", b"x")
    assert index._records <= 50
    assert held(index, "acme", "u-0") == ([], [])
    assert len(held(index, "acme", "u-19")[0]) == 10


def test_a_tombstone_or_a_forged_record_removes_the_key_and_a_record_names_its_own_key() -> None:
    index = LedgerIndex("127.0.0.1:1", TOPOLOGY, CODEC, per_subject=10, max_records=100)
    state(index, "a" * 64, record("a" * 64))
    state(index, "b" * 64, record("b" * 64))
    state(index, "a" * 64, None)
    state(index, "b" * 64, None, raw=b"\xc3\x01forged")
    state(index, "c" * 64, record("d" * 64))  # a record under another key is no record of it
    assert held(index, "acme", "u-1")[1] == []
    assert index._records == 0 and index._owner == {}
