"""The ``schemas`` topic: which schema fingerprints some vigil build has written (DESIGN.md §2, §10
"Schema upgrades").

Owns :func:`register_schemas` (every writer, before its first record; idempotent on a compacted
topic) and :class:`SchemaCatalog`: an unknown fingerprint registered there is a newer writer
(pause and alert), registered nowhere garbage (dead-letter). Leaves out reading the topic (a
global table of the runtime) and acting on the answer (``pipeline.runtime.poison``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Final

from fastavro.schema import to_parsing_canonical_form

from pipeline.kafka.clients import Producer
from pipeline.kafka.failover import FAILOVER_WAIT_S, ride_out
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import AvroCodec, SchemaVersion

__all__ = ["REGISTRATION_TIMEOUT_S", "SchemaCatalog", "register_schemas", "registration"]

REGISTRATION_TIMEOUT_S: Final = FAILOVER_WAIT_S


def registration(version: SchemaVersion) -> tuple[str, bytes]:
    """The ``schemas`` record of one schema: (fingerprint hex, parsing canonical form)."""
    canonical = to_parsing_canonical_form(version.parsed)
    return version.fingerprint.hex(), canonical.encode("utf-8")


def register_schemas(
    producer: Producer,
    topic: str,
    partitions: int,
    codec: AvroCodec,
    record_types: Iterable[str] | None = None,
    timeout_s: float = REGISTRATION_TIMEOUT_S,
) -> int:
    """Register the schema this build writes for each of ``record_types`` (default: every
    type it knows) and wait until the broker has them all; a leader moving meanwhile is waited
    out up to ``timeout_s``, sending again what it failed (same key, same value: idempotent).
    Returns how many registrations the broker acknowledged (one sent again counts again)."""
    types = sorted(codec.record_types if record_types is None else record_types)
    records = [registration(codec.newest(record_type)) for record_type in types]
    before = producer.delivered
    deadline = time.monotonic() + timeout_s

    def send() -> None:
        for key, value in records:
            producer.produce(topic, key, value, partition_for(key, partitions))
        producer.flush(max(0.1, deadline - time.monotonic()), "schema registrations")

    ride_out(send, f"registering schemas in {topic}", deadline)
    return producer.delivered - before


class SchemaCatalog:
    """Registered fingerprints, read from the ``schemas`` topic held as a table (hex → form)."""

    __slots__ = ("_table",)

    def __init__(self, table: Mapping[str, bytes]) -> None:
        self._table = table

    def registered(self, fingerprint: bytes) -> bool:
        """Whether some writer registered ``fingerprint`` (as of the table's last catch-up)."""
        return fingerprint.hex() in self._table
