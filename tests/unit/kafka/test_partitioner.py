from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kafka.partitioner import murmur2, partition_for
from tests.vectors import VECTORS

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("case", VECTORS["java_murmur2_partition"], ids=lambda c: c["key"])
def test_murmur2_matches_java_vectors(case: dict[str, Any]) -> None:
    key = case["key"].encode()
    assert murmur2(key) == case["murmur2_signed"]
    assert partition_for(key, 12) == case["partition_of_12"]
    assert partition_for(case["key"], 3) == case["partition_of_3"]


def test_partition_for_rejects_zero_partitions() -> None:
    with pytest.raises(ValueError):
        partition_for(b"k", 0)


def _murmur2_word_by_word(data: bytes) -> int:
    """The reference form: Java's ``Utils.murmur2`` line by line."""
    seed, m, mask = 0x9747B28C, 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (seed ^ length) & mask
    end = length - (length % 4)
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_murmur2_equals_the_word_by_word_form(data: bytes) -> None:
    assert murmur2(data) == _murmur2_word_by_word(data)


@given(
    st.text(st.characters(codec="utf-8"), max_size=120),
    st.integers(min_value=1, max_value=1024),
)
def test_partition_for_text_is_its_utf8_bytes_partition(key: str, partitions: int) -> None:
    expected = (_murmur2_word_by_word(key.encode("utf-8")) & 0x7FFFFFFF) % partitions
    assert partition_for(key, partitions) == expected
    assert partition_for(key.encode("utf-8"), partitions) == expected
