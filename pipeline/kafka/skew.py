"""This host's clock against the broker's: the one time source every vigil process shares.

Owns :func:`broker_clock_skew`: one small record to the ``<prefix>doctor`` topic
(``LogAppendTime``, made on first use) and the broker's stamp compared with the midpoint of the
local send and acknowledgement, good to half the round trip. Leaves out what skew is acceptable
(``vigil doctor`` says).
"""

from __future__ import annotations

import time
from typing import Any, Final

import confluent_kafka
from confluent_kafka import KafkaException, Message
from confluent_kafka.cimpl import NewTopic

from pipeline.kafka.admin import connect_admin
from pipeline.kafka.clients import producer_config, translate
from pipeline.rules.errors import BrokerError

__all__ = ["DOCTOR_TOPIC", "broker_clock_skew"]

DOCTOR_TOPIC: Final = "doctor"
_CONFIGS: Final = {"message.timestamp.type": "LogAppendTime", "retention.ms": "3600000"}


def broker_clock_skew(bootstrap: str, prefix: str, timeout_s: float = 5.0) -> float:
    """Seconds the broker's clock is ahead of this host's (negative: behind)."""
    topic = f"{prefix}{DOCTOR_TOPIC}"
    admin = connect_admin(bootstrap)
    future = admin.create_topics([NewTopic(topic, 1, replication_factor=-1, config=_CONFIGS)])
    try:
        future[topic].result(timeout=timeout_s)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):  # made by an earlier check: fine
            raise translate(exc, f"create {topic}") from exc
    stamps: list[tuple[int, int]] = []
    plain: dict[str, Any] = {"enable.idempotence": False, "linger.ms": 0}
    producer = confluent_kafka.Producer(producer_config(bootstrap, **plain))

    def delivered(error: object, message: Message) -> None:
        if error is None:
            stamps.append(message.timestamp())

    sent = time.time()
    producer.produce(topic, b"clock", on_delivery=delivered)
    producer.flush(timeout_s)
    acked = time.time()
    if not stamps:
        raise BrokerError(f"no acknowledgement from {topic} within {timeout_s:g}s")
    kind, stamp_ms = stamps[0]
    if kind != confluent_kafka.TIMESTAMP_LOG_APPEND_TIME:
        raise BrokerError(f"{topic} does not stamp records with the broker's time")
    return stamp_ms / 1000 - (sent + acked) / 2
