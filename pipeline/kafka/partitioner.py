"""Which partition a key lives on: Java's default partitioner, the one rule for every producer.

``(murmur2(key) & 0x7fffffff) % N`` exactly as ``org.apache.kafka.common.utils.Utils.murmur2``,
so Python and Java producers place a key alike (librdkafka's ``murmur2_random`` agrees for
non-empty keys). Hand-written because no maintained Python package exposes Kafka's variant;
it is a dozen lines and tested against Java's own vectors. The native path
(``pipeline.rules.native``) hashes with ``vigil_native.murmur2``, held to this one.
"""

from __future__ import annotations

from struct import unpack_from

from pipeline.rules.native import NATIVE

__all__ = ["murmur2", "partition_for"]


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 as a signed 32-bit int (what Java's ``Utils.murmur2`` returns).

    The body words are unpacked in one call and the constants written inline (seed
    ``0x9747B28C``, multiplier ``0x5BD1E995``): this runs for every keyed record the runtime
    places, so it is written for CPython's speed, not for reading; the tests hold it to the
    word-by-word form and to Java's vectors."""
    length = len(data)
    h = 0x9747B28C ^ length
    words = length >> 2
    for k in unpack_from(f"<{words}I", data):
        k = (k * 0x5BD1E995) & 0xFFFFFFFF
        h = ((h * 0x5BD1E995) ^ ((k ^ (k >> 24)) * 0x5BD1E995)) & 0xFFFFFFFF
    rest = length & 3
    if rest:
        end = words << 2
        if rest == 3:
            h ^= data[end + 2] << 16
        if rest >= 2:
            h ^= data[end + 1] << 8
        h = ((h ^ data[end]) * 0x5BD1E995) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(key: bytes | str, partitions: int) -> int:
    """The partition of ``key`` among ``partitions``."""
    if partitions <= 0:
        raise ValueError("a topic has at least one partition")
    raw = key.encode("utf-8") if isinstance(key, str) else key
    return (_murmur2(raw) & 0x7FFFFFFF) % partitions


_murmur2 = murmur2 if NATIVE is None else NATIVE.murmur2
