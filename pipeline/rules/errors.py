"""Every error vigil raises, in one place, under one base: :class:`VigilError`, whose docstring
draws the hierarchy.

Each error names what its reader needs to act on (the field, the key, the states, the address or the
fixing command). Kafka and Redis failures become :class:`BrokerError` and :class:`BudgetStoreError`
(both :class:`InfrastructureError`) at their boundaries."""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "BudgetStoreError",
    "ConfigError",
    "DefinitionError",
    "ErasedError",
    "InfrastructureError",
    "SerdeError",
    "TopologyError",
    "TransitionError",
    "UnavailableError",
    "UnknownSchemaError",
    "VigilError",
]


class VigilError(Exception):
    """Base of every error vigil raises on purpose::

    VigilError
    ├── DefinitionError        a definition, condition or value breaks a rule (names the field)
    ├── TransitionError        an illegal lifecycle or dispatch state move
    ├── ConfigError            vigil.toml is missing or invalid (names the key)
    ├── SerdeError             bytes that do not decode as a record
    │   └── UnknownSchemaError a schema fingerprint this build does not know
    ├── ErasedError            a sealed field whose data key is gone: reads as erased
    ├── TopologyError          topics missing or drifted (says the command that fixes it)
    ├── InfrastructureError    a server vigil depends on failed: no record is to blame, retry
    │   ├── BrokerError        Kafka failed (translated at the boundary)
    │   └── BudgetStoreError   Redis unreachable or failed (translated at the boundary)
    └── UnavailableError       a server a command needs does not answer (address, key, fix)
    """


class DefinitionError(VigilError):
    """A definition or value breaks a rule. ``field`` is the dotted path of what is wrong."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.message = message
        self.field = field


class TransitionError(VigilError):
    """An illegal state-machine move (lifecycle or dispatch)."""


class ConfigError(VigilError):
    """Configuration is missing or invalid."""


class SerdeError(VigilError):
    """Bytes that do not decode as a vigil record."""


class UnknownSchemaError(SerdeError):
    """A schema fingerprint this build does not know. Registered in the ``schemas`` topic: a
    newer writer (pause, never dead-letter); registered nowhere: garbage (dead-letter it)."""

    def __init__(self, message: str, fingerprint: bytes = b"") -> None:
        super().__init__(message)
        self.fingerprint = fingerprint


class ErasedError(VigilError):
    """A sealed subject field whose data key is gone (cancel, erasure): it reads as erased."""


class TopologyError(VigilError):
    """Topics are missing or drifted from their specs."""


class InfrastructureError(VigilError):
    """A server vigil depends on (the broker, the budget store) failed. No record is to blame:
    the work in hand is rolled back and retried, never dead-lettered."""


class BrokerError(InfrastructureError):
    """A Kafka operation failed."""


class BudgetStoreError(InfrastructureError):
    """The budget store (Redis) is unreachable or failed: defer, never run unbudgeted."""


class UnavailableError(VigilError):
    """A server a command needs (the Kafka broker, Redis) does not answer. The message is one
    line naming the address, the configuration key that set it and the fix; the CLI exits 69
    (``EX_UNAVAILABLE``) on it. ``address`` never holds a credential."""

    def __init__(self, what: str, address: str, key: str, fix: str, detail: str = "") -> None:
        because = f" ({detail})" if detail else ""
        super().__init__(f"{what} at {address} does not answer{because}: set {key} or {fix}")
        self.what = what
        self.address = address
        self.key = key
        self.fix = fix
