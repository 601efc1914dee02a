"""Whether the Kafka broker answers, asked once and quickly before a command relies on it.

Owns :func:`probe_broker`: the cluster's metadata within a short deadline, any failure one
:class:`~pipeline.rules.errors.UnavailableError` naming the address, the configuration key that
set it and the fix (the CLI prints it and exits 69). Leaves out what a process does once the
broker answered (and later goes away: ``pipeline.runtime`` rides that out).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from confluent_kafka import KafkaError, KafkaException

from pipeline.kafka.admin import connect_admin
from pipeline.rules.errors import UnavailableError

__all__ = ["BROKER_KEY", "PROBE_TIMEOUT_S", "BrokerInfo", "probe_broker"]

PROBE_TIMEOUT_S: Final = 2.5
_SLICE_S: Final = 0.25
_PROBE_TOPIC: Final = "__vigil_probe"  # asked about, never created
_SLOW: Final = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT})  # ask again
BROKER_KEY: Final = "[kafka] bootstrap_servers"
START_ONE: Final = "start one with `vigil dev`"
_CREDENTIALS: Final = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }
)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """What the cluster says about itself."""

    cluster_id: str | None
    controller: str | None  # host:port of the active controller, when the cluster says
    brokers: tuple[str, ...]  # host:port of each broker the cluster advertises


def probe_broker(bootstrap: str, timeout_s: float = PROBE_TIMEOUT_S) -> BrokerInfo:
    """The cluster behind ``bootstrap``, or :class:`UnavailableError` within ``timeout_s``.

    A metadata request for one topic that need not exist (light, whatever the topic count; topic
    creation off, so it is never made), asked in growing slices with librdkafka's error
    callback served in between: a refused connection ("all brokers down") or refused
    credentials end the wait at once. Not DescribeCluster: a broker shutting down answers it
    with no brokers and no topics, which aborts the whole process inside librdkafka (2.16: its
    parser reports success with no result, and ``rd_assert`` fails) — every process probes
    every few seconds, so a broker restart could take any of them down."""
    errors: list[KafkaError] = []
    admin = connect_admin(
        bootstrap,
        {
            "socket.connection.setup.timeout.ms": "2000",
            "allow.auto.create.topics": "false",
            "error_cb": errors.append,
        },
    )
    deadline = time.monotonic() + timeout_s
    wait = _SLICE_S
    while True:
        left = deadline - time.monotonic()
        try:
            metadata = admin.list_topics(_PROBE_TOPIC, timeout=max(0.05, min(wait, left)))
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() not in _SLOW:
                raise _unavailable(bootstrap, [*errors, error]) from None
            admin.poll(0)  # serves error_cb
            codes = {error.code() for error in errors}
            if codes & _CREDENTIALS or KafkaError._ALL_BROKERS_DOWN in codes:
                raise _unavailable(bootstrap, errors) from None
            if time.monotonic() >= deadline:
                raise _unavailable(bootstrap, errors) from None
            wait *= 2  # a slow broker gets a longer wait each time, not the same short one
            continue
        brokers = {b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()}
        if not brokers:  # a broker shutting down lists none: as good as absent
            raise _unavailable(bootstrap, errors)
        return BrokerInfo(
            metadata.cluster_id, brokers.get(metadata.controller_id), tuple(brokers.values())
        )


def _unavailable(bootstrap: str, errors: list[KafkaError]) -> UnavailableError:
    refused = next((e for e in errors if e.code() in _CREDENTIALS), None)
    if refused is not None:
        return UnavailableError(
            "the Kafka broker",
            bootstrap,
            "[kafka.client]",
            "check its security settings (security_protocol, sasl_*, ssl_*)",
            detail=f"refused the connection: {refused.name()}",
        )
    codes = [e.name() for e in errors]
    name = (
        "_ALL_BROKERS_DOWN" if "_ALL_BROKERS_DOWN" in codes else codes[0] if codes else "no answer"
    )
    return UnavailableError("the Kafka broker", bootstrap, BROKER_KEY, START_ONE, detail=name)
