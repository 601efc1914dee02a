"""The ``schemas`` topic: which schema fingerprints some vigil build has written (DESIGN.md §2,
§10 "Schema upgrades").

Every writer registers each schema it writes before its first record
(:func:`register_schemas`: key the fingerprint in hex, value the schema's parsing canonical form,
on a compacted topic, so registering again changes nothing). A reader that meets a fingerprint
its own build does not know asks the topic, read whole and caught up after the record was read
(:class:`SchemaCatalog`): registered there means a newer writer, so the partition pauses and an
alert fires; registered nowhere means garbage (a forged or foreign record), which is
dead-lettered so that ten forged bytes can never stall a partition.

Leaves out reading the topic (the stream runtime holds it as a global table, caught up before
every batch) and what to do with the answer (``pipeline.runtime.poison``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from fastavro.schema import to_parsing_canonical_form

from pipeline.kafka.clients import Producer
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import AvroCodec, SchemaVersion

__all__ = ["REGISTRATION_TIMEOUT_S", "SchemaCatalog", "register_schemas", "registration"]

REGISTRATION_TIMEOUT_S: Final = 30.0


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
) -> int:
    """Register the schema this build writes for each of ``record_types`` (default: every
    type it knows) and wait until the broker has them all; returns how many were sent.
    Idempotent (same key, same value)."""
    sent = 0
    for record_type in sorted(codec.record_types if record_types is None else record_types):
        key, value = registration(codec.newest(record_type))
        producer.produce(topic, key, value, partition_for(key, partitions))
        sent += 1
    producer.flush(REGISTRATION_TIMEOUT_S, "schema registrations")
    return sent


class SchemaCatalog:
    """Registered fingerprints, read from the ``schemas`` topic held as a table (hex → form)."""

    __slots__ = ("_table",)

    def __init__(self, table: Mapping[str, bytes]) -> None:
        self._table = table

    def registered(self, fingerprint: bytes) -> bool:
        """Whether some writer registered ``fingerprint`` (as of the table's last catch-up)."""
        return fingerprint.hex() in self._table
