"""Whether the Kafka broker answers, asked once and quickly before a command relies on it.

:func:`probe_broker` asks for the cluster's metadata with a short deadline (a broker that does
not answer within it is as good as absent to a person at a terminal) and turns any failure into
one :class:`~pipeline.rules.errors.UnavailableError` naming the address, the configuration key
that set it and the fix; the CLI prints that one line and exits 69. librdkafka's own log lines
go to the ``librdkafka`` logger (``pipeline.kafka.properties``), never to the terminal.

Leaves out what a process does once the broker answered (and later goes away: the runtime
rides that out, ``pipeline.runtime``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from pipeline.kafka.admin import connect_admin
from pipeline.rules.errors import UnavailableError

__all__ = ["BROKER_KEY", "PROBE_TIMEOUT_S", "BrokerInfo", "probe_broker"]

PROBE_TIMEOUT_S: Final = 2.5
_SLICE_S: Final = 0.25
_UNSUPPORTED: Final = frozenset({KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION})
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

    One DescribeCluster request (light, whatever the topic count; brokers without it answer a
    metadata request instead), waited for in short slices with librdkafka's error callback
    served in between: a refused connection ("all brokers down") or refused credentials end
    the wait at once."""
    errors: list[KafkaError] = []
    admin = connect_admin(
        bootstrap, {"socket.connection.setup.timeout.ms": "2000", "error_cb": errors.append}
    )
    deadline = time.monotonic() + timeout_s
    future = admin.describe_cluster(request_timeout=timeout_s)
    while True:
        try:
            found = future.result(timeout=_SLICE_S)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() in _UNSUPPORTED:
                return _from_metadata(admin, bootstrap, deadline)
            raise _unavailable(
                bootstrap, [*errors, *([error] if isinstance(error, KafkaError) else [])]
            ) from None
        except TimeoutError:
            admin.poll(0)  # serves error_cb
            codes = {error.code() for error in errors}
            if codes & _CREDENTIALS or KafkaError._ALL_BROKERS_DOWN in codes:
                raise _unavailable(bootstrap, errors) from None
            if time.monotonic() >= deadline:
                raise _unavailable(bootstrap, errors) from None
            continue
        controller = found.controller
        return BrokerInfo(
            found.cluster_id,
            None if controller is None else f"{controller.host}:{controller.port}",
            tuple(f"{node.host}:{node.port}" for node in found.nodes),
        )


def _from_metadata(admin: AdminClient, bootstrap: str, deadline: float) -> BrokerInfo:
    try:
        metadata = admin.list_topics(timeout=max(0.1, deadline - time.monotonic()))
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        raise _unavailable(bootstrap, [error] if isinstance(error, KafkaError) else []) from None
    brokers = {b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()}
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
