"""One Kafka transaction from outside a stream stage: a batch of records written all or none.

Owns :func:`write_in_one_transaction` (``vigil replay --apply``): a stable ``transactional.id``
(a second writer fences the first, a crashed one's transaction is aborted by the next), each
record on its explicit partition; any failure aborts and raises ``BrokerError``. Leaves out
consumed offsets and the stream runtime's transactions (``pipeline.runtime.transactions``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import NamedTuple

import confluent_kafka
from confluent_kafka import KafkaException

from pipeline.kafka.clients import producer_config
from pipeline.kafka.failures import translate

__all__ = ["Record", "write_in_one_transaction"]


class Record(NamedTuple):
    topic: str
    key: str
    value: bytes | None
    partition: int


def write_in_one_transaction(
    bootstrap: str, transactional_id: str, records: Sequence[Record], timeout_s: float = 30.0
) -> int:
    """Write ``records`` in one committed transaction; returns how many."""
    producer = confluent_kafka.Producer(
        producer_config(bootstrap, transactional_id=transactional_id)
    )
    try:
        producer.init_transactions(timeout_s)
        producer.begin_transaction()
        for record in records:
            producer.produce(record.topic, record.value, record.key, record.partition)
            producer.poll(0)
        producer.commit_transaction(timeout_s)
    except KafkaException as exc:
        with contextlib.suppress(KafkaException):  # else the next init_transactions aborts it
            producer.abort_transaction(timeout_s)
        raise translate(exc, f"writing {len(records)} records in one transaction") from exc
    finally:
        producer.flush(1)
    return len(records)
