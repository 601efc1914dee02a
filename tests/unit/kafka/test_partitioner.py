from typing import Any

import pytest

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
