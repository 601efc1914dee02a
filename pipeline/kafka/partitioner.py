"""Which partition a key lives on: Java's default partitioner, the one rule for every producer.

``(murmur2(key) & 0x7fffffff) % N`` exactly as ``org.apache.kafka.common.utils.Utils.murmur2``,
so Python and Java producers place a key alike (librdkafka's ``murmur2_random`` agrees for
non-empty keys). Hand-written because no maintained Python package exposes Kafka's variant;
it is a dozen lines and tested against Java's own vectors.
"""

from __future__ import annotations

__all__ = ["murmur2", "partition_for"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 as a signed 32-bit int (what Java's ``Utils.murmur2`` returns)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - (length % 4)
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes | str, partitions: int) -> int:
    """The partition of ``key`` among ``partitions``."""
    if partitions <= 0:
        raise ValueError("a topic has at least one partition")
    raw = key.encode("utf-8") if isinstance(key, str) else key
    return (murmur2(raw) & 0x7FFFFFFF) % partitions
