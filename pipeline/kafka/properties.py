"""librdkafka properties from configuration, and where librdkafka's own log lines go.

Owns ``[kafka.client]``, ``[kafka.producer]`` and ``[kafka.consumer]`` (``_env`` keys name a
secret's variable), :func:`check` (validated by librdkafka itself; the properties vigil sets on
purpose refused), :func:`use` (the base of every client made afterwards) and the ``librdkafka``
logger (:data:`LOG`, :func:`verbose`). Leaves out each kind of client's defaults (``clients``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import confluent_kafka
from confluent_kafka import KafkaException

__all__ = [
    "LOG",
    "RESERVED",
    "ClientProperties",
    "PropertyScope",
    "active",
    "check",
    "is_secret",
    "property_name",
    "use",
    "verbose",
]

LOG: Final = logging.getLogger("librdkafka")
LOG.setLevel(logging.CRITICAL + 1)  # quiet until a process asks for it (verbose)

PropertyScope = Literal["client", "producer", "consumer"]
Value = str | int | float | bool

# What vigil sets on purpose: overriding one would break placement, transactions or fencing.
RESERVED: Final = frozenset(
    {
        "bootstrap.servers",  # [kafka] bootstrap_servers
        "group.id",
        "group.instance.id",
        "group.protocol",
        "partition.assignment.strategy",
        "transactional.id",
        "transaction.timeout.ms",
        "enable.idempotence",
        "acks",
        "request.required.acks",
        "partitioner",
        "isolation.level",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "auto.offset.reset",
        "logger",
        "error_cb",
        "throttle_cb",
        "stats_cb",
        "oauth_cb",
        "on_delivery",
        "on_commit",
    }
)
_SECRET_WORDS: Final = ("password", "secret")
_SECRET_NAMES: Final = frozenset(
    {"ssl.key.pem", "sasl.oauthbearer.config", "ssl.keystore.password"}
)
_NAME: Final = re.compile(r"^[a-z][a-z0-9._]{0,99}$")
_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def property_name(key: str) -> str:
    """The librdkafka name of a TOML key: ``security_protocol`` → ``security.protocol``."""
    return key.replace("_", ".")


def is_secret(name: str) -> bool:
    """Whether a property holds a credential (given only by an ``*_env`` reference)."""
    return name in _SECRET_NAMES or any(word in name for word in _SECRET_WORDS)


def verbose(on: bool) -> None:
    """librdkafka's log lines at INFO and above when ``on``, else none."""
    LOG.setLevel(logging.INFO if on else logging.CRITICAL + 1)


@dataclass(frozen=True, slots=True)
class ClientProperties:
    """Resolved properties (secrets read from the environment), by the clients they apply to."""

    client: Mapping[str, Value] = field(default_factory=dict)
    producer: Mapping[str, Value] = field(default_factory=dict)
    consumer: Mapping[str, Value] = field(default_factory=dict)

    def for_producer(self) -> dict[str, Value]:
        return {**self.client, **self.producer}

    def for_consumer(self) -> dict[str, Value]:
        return {**self.client, **self.consumer}

    def for_admin(self) -> dict[str, Value]:
        return dict(self.client)


_active = ClientProperties()


def use(properties: ClientProperties) -> None:
    """Base every client this process creates from now on on ``properties``."""
    global _active
    _active = properties


def active() -> ClientProperties:
    """The properties :func:`use` set (none: empty)."""
    return _active


def check(table: Mapping[str, Any], role: PropertyScope) -> list[tuple[str, str]]:
    """Problems of one ``[kafka.<role>]`` table as ``(key, message)`` pairs (none: valid).

    Total over any mapping: names are length- and pattern-checked before librdkafka sees them.

    TOML keys are librdkafka property names with ``_`` for ``.`` (``security_protocol``) or quoted
    as they are (``"security.protocol"``); a key ending in ``_env`` names the environment variable
    that holds the value (``sasl_password_env = "KAFKA_PASSWORD"``), the only way a secret property
    may be given. Validated with a throwaway client handle that never connects; the properties vigil
    sets on purpose (group and transactional ids, isolation, idempotence, placement…) are refused.
    """
    problems: list[tuple[str, str]] = []
    literal: dict[str, tuple[str, str]] = {}  # property name → (its key, a text value)
    for key, value in table.items():
        if not isinstance(key, str) or len(key) > 100:
            problems.append((str(key)[:100], "not a librdkafka property name"))
            continue
        reference = key.endswith("_env")
        name = property_name(key.removesuffix("_env") if reference else key)
        if not _NAME.fullmatch(name):
            problems.append((key, "not a librdkafka property name"))
        elif name in RESERVED:
            problems.append((key, f"{name} is set by vigil and cannot be overridden"))
        elif reference:
            if isinstance(value, str) and _ENV_NAME.fullmatch(value):
                literal[name] = (key, "x")  # the value is unknown here: check the name only
            else:
                problems.append((key, "expected the name of an environment variable"))
        elif is_secret(name):
            problems.append((key, f"a secret: name its variable with {key}_env instead"))
        elif isinstance(value, bool):
            literal[name] = (key, "true" if value else "false")
        elif isinstance(value, str | int | float):
            literal[name] = (key, str(value))
        else:
            problems.append((key, "expected a string, number or boolean"))
    if not problems:
        problems.extend(_librdkafka_check(literal, role))
    return problems


def _librdkafka_check(
    properties: Mapping[str, tuple[str, str]], role: PropertyScope
) -> list[tuple[str, str]]:
    """Each name and value set on a throwaway handle of its own (no bootstrap servers: it never
    connects); how properties combine is librdkafka's to judge when the real client starts."""
    problems = []
    for name, (key, value) in properties.items():
        settings: dict[str, Any] = {name: value, "logger": LOG}
        try:
            if role == "consumer":
                handle: Any = confluent_kafka.Consumer({"group.id": "vigil.check", **settings})
            else:
                handle = confluent_kafka.Producer(settings)
        except (KafkaException, ValueError, TypeError) as exc:
            reason = _reason(exc)
            # Setting the name and value passed; creating the handle failed on how properties
            # combine (a mechanism, a file): that is checked when the real client starts.
            if not reason.startswith("Failed to create"):
                problems.append((key, reason))
            continue
        if role == "consumer":
            handle.close()
    return problems


def _reason(exc: BaseException) -> str:
    error = exc.args[0] if exc.args else exc
    text = error.str() if hasattr(error, "str") else str(error)
    return text.splitlines()[0][:200] if text else "refused by librdkafka"
