"""The sections of ``vigil.toml`` that configure a process and its host: ``[kafka]``,
``[redis]``, ``[subject]``, ``[agent]``, ``[run]``, ``[rpc]``, ``[api]``, ``[operator]``,
``[limits]``, ``[metrics]``, ``[principals.*]``, ``[privacy]`` and ``[instance]``.

Left out: where deliveries go (``targets``), budgets (``budgets``) and the whole file
(``model``).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    SecretStr,
    model_validator,
)

from pipeline.config.values import EnvName, Id, Listen, Name, Section, UserName, Zone
from pipeline.crypto.kek import DEFAULT_ENV as DEFAULT_KEK_ENV
from pipeline.crypto.kek import KeyEncryptionKeys
from pipeline.crypto.ring import DEFAULT_CACHE
from pipeline.kafka.properties import ClientProperties, PropertyScope, property_name
from pipeline.kafka.properties import check as check_properties
from pipeline.kafka.topics import DEFAULT_PARTITIONS, DEFAULT_PREFIX, Topology
from pipeline.redis.connect import SCHEMES as REDIS_SCHEMES
from pipeline.redis.connect import parse_url as parse_redis_url
from pipeline.rules.authz import Role
from pipeline.rules.commands.limits import Limits
from pipeline.rules.durations import Duration
from pipeline.rules.errors import ConfigError
from pipeline.rules.namespace import NAMESPACE_PATTERN

__all__ = [
    "AgentConfig",
    "ApiConfig",
    "InstanceConfig",
    "KafkaConfig",
    "LimitsConfig",
    "MetricsConfig",
    "OperatorConfig",
    "PrincipalConfig",
    "PrivacyConfig",
    "Properties",
    "RedisConfig",
    "RpcConfig",
    "RunConfig",
    "SubjectConfig",
]


def _sha256_hex(value: object) -> object:
    text = value.get_secret_value() if isinstance(value, SecretStr) else value
    if not isinstance(text, str) or not re.fullmatch(r"[0-9a-f]{64}", text):
        # The value is never echoed: it is a credential digest.
        raise ValueError("expected the hex SHA-256 of the token (64 lowercase hex characters)")
    return text


def _redis_url(value: SecretStr) -> SecretStr:
    text = value.get_secret_value()
    scheme = text.partition("://")[0]
    if scheme not in REDIS_SCHEMES:
        raise ValueError(
            "expected a redis://, rediss://, unix://, redis+cluster:// or redis+sentinel:// URL"
        )
    if "+" in scheme:
        try:
            parse_redis_url(text)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
    return value


def _properties(role: PropertyScope) -> AfterValidator:
    def check(table: dict[str, Any]) -> dict[str, Any]:
        problems = check_properties(table, role)
        if problems:
            # One message per table; each problem names its key (the value is never echoed).
            raise ValueError("; ".join(f"{key}: {message}" for key, message in problems))
        return table

    return AfterValidator(check)


Properties = dict[str, str | int | float | bool]


class KafkaConfig(Section):
    """``[kafka]``; ``[kafka.client]``, ``[kafka.producer]`` and ``[kafka.consumer]`` pass
    librdkafka properties through (``pipeline.kafka.properties``: secrets by ``*_env`` only)."""

    bootstrap_servers: str = Field(default="127.0.0.1:9092", min_length=1)
    topic_prefix: str = Field(default=DEFAULT_PREFIX, pattern=r"^[A-Za-z0-9._-]{0,200}$")
    partitions: int = Field(default=DEFAULT_PARTITIONS, ge=1)
    replication_factor: int = Field(default=-1, ge=-1, description="-1: the broker's default")
    min_insync_replicas: int | None = Field(
        default=None, ge=1, description="None: replication - 1 from 3 replicas on"
    )
    group_protocol: Literal["auto", "consumer", "classic"] = Field(
        default="classic",
        description="consumer groups: classic + range, KIP-848 (consumer), or auto (probe)",
    )
    client: Annotated[Properties, Field(max_length=200), _properties("client")] = Field(
        default_factory=dict
    )
    producer: Annotated[Properties, Field(max_length=200), _properties("producer")] = Field(
        default_factory=dict
    )
    consumer: Annotated[Properties, Field(max_length=200), _properties("consumer")] = Field(
        default_factory=dict
    )

    @model_validator(mode="after")
    def _min_insync_fits(self) -> KafkaConfig:
        wanted, replicas = self.min_insync_replicas, self.replication_factor
        if wanted is not None and replicas > 0 and wanted > replicas:
            raise ValueError(
                f"min_insync_replicas {wanted} exceeds replication_factor {replicas}: "
                "no write could ever be acknowledged"
            )
        return self

    def topology(self) -> Topology:
        return Topology(
            self.topic_prefix,
            self.partitions,
            self.replication_factor,
            min_insync_replicas=self.min_insync_replicas,
        )

    def client_properties(self, environ: Mapping[str, str] | None = None) -> ClientProperties:
        """The passthrough properties with every ``*_env`` reference read from ``environ``
        (a variable that is not set: a one-line :class:`ConfigError` naming the key)."""
        env = os.environ if environ is None else environ
        resolved = []
        for role, table in (
            ("client", self.client),
            ("producer", self.producer),
            ("consumer", self.consumer),
        ):
            out: dict[str, str | int | float | bool] = {}
            for key, value in table.items():
                if key.endswith("_env"):
                    found = env.get(str(value))
                    if not found:
                        raise ConfigError(f"kafka.{role}.{key}: the variable {value} is not set")
                    out[property_name(key.removesuffix("_env"))] = found
                else:
                    out[property_name(key)] = value
            resolved.append(out)
        return ClientProperties(*resolved)


class RedisConfig(Section):
    url: Annotated[SecretStr, AfterValidator(_redis_url)] = SecretStr("redis://127.0.0.1:6379/0")


class SubjectConfig(Section):
    """The local user the CLI acts as."""

    tenant_id: Id = "local"
    user_id: Id = "me"
    timezone: Zone | None = None  # None: the system zone


class AgentConfig(Section):
    """The agent behind ``prompt``/``query``. ``run_as`` runs it under another local user, whose
    uid the daemon maps to the agent role (DESIGN.md §10); ``allow_same_uid`` is the explicit
    opt-in to an agent under the daemon's own uid instead; ``env`` names the variables it gets
    beyond PATH, HOME, LANG and TZ (never one of vigil's secrets)."""

    command: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, min_length=1)
    timeout: Duration = timedelta(seconds=120)
    run_as: UserName | None = None
    socket_path: Path | None = None  # with run_as; default: a fresh private directory in /tmp
    env: tuple[EnvName, ...] = ()
    skill: Path | None = None  # VIGIL_SKILL of every run; default: the shipped agent-skill.md
    # Without run_as the agent shares the daemon's uid: refused unless said here (vigil dev does).
    allow_same_uid: bool = False


class RunConfig(Section):
    allow_dir: Annotated[Path, AfterValidator(lambda p: p.expanduser())] = Path(
        "~/.config/vigil/scripts"
    ).expanduser()
    env: tuple[EnvName, ...] = ()  # beyond PATH, HOME, LANG and TZ


class RpcConfig(Section):
    socket_path: Path | None = None  # None: $XDG_RUNTIME_DIR/vigil.sock


class ApiConfig(Section):
    listen: Listen = "127.0.0.1:8088"
    max_body: int = Field(default=1 << 20, ge=1024, le=64 << 20)  # bytes of one request body
    max_scan: int = Field(default=10_000, ge=100, le=1_000_000)  # records one ledger read scans
    # Requests per second one principal may make (API and console together), after a burst.
    rate: float = Field(default=20.0, gt=0, le=100_000)
    burst: int = Field(default=100, ge=1, le=1_000_000)
    sign_in_per_minute: int = Field(default=10, ge=1, le=10_000)  # per client address
    command_clients: int = Field(default=4, ge=1, le=64)  # concurrent command round trips
    command_wait: Duration = timedelta(seconds=5)  # for a free command client, then 503
    sessions_per_principal: int = Field(default=20, ge=1, le=10_000)  # console sign-ins kept
    # The console cookie's Secure flag: "auto" sets it except on plain http to a loopback
    # host from a loopback client (vigil dev); "always" sets it whatever the request says.
    secure_cookie: Literal["auto", "always"] = "auto"
    # The ledger index: each subject's newest notifications and delivery keys, all in all.
    index_per_subject: int = Field(default=1_000, ge=10, le=1_000_000)
    index_records: int = Field(default=200_000, ge=1_000, le=100_000_000)


class OperatorConfig(Section):
    """The operator identity ``vigil --as-operator`` acts as (grants, erasure, other subjects).
    Absent: the CLI has no operator verbs."""

    name: Name | None = None


class LimitsConfig(Section):
    """What one subject (and one agent session) may hold live (DESIGN.md §10 "Limits"), and
    what the daemon holds for its peers: an agent run's output kept, its socket's connections."""

    watchers: int = Field(default=1_000, ge=1)
    proposals: int = Field(default=100, ge=1)
    proposal_ttl: Duration = timedelta(hours=24)
    schedules: int = Field(default=100, ge=1)
    session_schedules: int = Field(default=10, ge=1)
    session_proposals: int = Field(default=10, ge=1)
    agent_cron_ttl: Duration = timedelta(days=30)  # an agent's cron schedule expires by then
    agent_output: int = Field(default=1 << 20, ge=4096, le=1 << 30)  # bytes of stdout, of stderr
    socket_connections: int = Field(default=64, ge=1, le=4096)  # served at once
    socket_idle: Duration = timedelta(seconds=30)  # for a connection's next complete request

    @model_validator(mode="after")
    def _ttl(self) -> LimitsConfig:
        if not timedelta(minutes=1) <= self.proposal_ttl <= timedelta(days=30):
            raise ValueError("proposal_ttl is between 1m and 30d")
        if not timedelta(minutes=1) <= self.agent_cron_ttl <= timedelta(days=366):
            raise ValueError("agent_cron_ttl is between 1m and 366d")
        if not timedelta(seconds=1) <= self.socket_idle <= timedelta(hours=1):
            raise ValueError("socket_idle is between 1s and 1h")
        return self

    def limits(self) -> Limits:
        return Limits(
            watchers=self.watchers,
            proposals=self.proposals,
            proposal_ttl=self.proposal_ttl,
            schedules=self.schedules,
            session_schedules=self.session_schedules,
            session_proposals=self.session_proposals,
            agent_cron_ttl=self.agent_cron_ttl,
        )


class MetricsConfig(Section):
    """Each process's ``/metrics``, ``/healthz`` and ``/readyz`` listener: the host of ``listen``,
    its port plus the process's offset (command-processor +0, evaluator +1, ticker +2,
    delivery +3, daemon +4, api +5) unless ``ports`` names one; a port of 0 picks a free one
    (logged, and written to the state directory). ``max_lag``: records a group may be behind
    and still be ready."""

    listen: Listen = "127.0.0.1:9464"
    ports: dict[
        Literal["command-processor", "evaluator", "ticker", "delivery", "daemon", "api"],
        Annotated[int, Field(ge=0, le=65535)],
    ] = Field(default_factory=dict)
    max_lag: int = Field(default=1_000, ge=0)


class PrincipalConfig(Section):
    token_sha256: Annotated[SecretStr, BeforeValidator(_sha256_hex)]
    role: Role
    tenant_id: Id
    user_id: Id
    session_id: Id | None = None
    sources: tuple[Id, ...] = Field(default=(), max_length=10_000)  # a publisher's source ids

    @model_validator(mode="after")
    def _session_bound(self) -> PrincipalConfig:
        if self.role is Role.SYSTEM:
            raise ValueError("system is vigil's own principal and cannot be configured")
        if self.role in (Role.AGENT, Role.SCOPED_CHAT) and self.session_id is None:
            raise ValueError(f"a {self.role.value} principal needs session_id")
        if (self.role is Role.PUBLISHER) != bool(self.sources):
            raise ValueError("sources: a publisher principal names its source ids; no other does")
        return self


class PrivacyConfig(Section):
    """Where the key-encryption keys come from (DESIGN §10 "Erasure's reach"): the variable
    ``master_key_env`` names, else ``master_key_file`` (``vigil dev`` writes one in its state
    directory). Neither set is refused when a process starts, with the fix."""

    master_key_env: EnvName = DEFAULT_KEK_ENV
    master_key_file: Annotated[Path, AfterValidator(lambda p: p.expanduser())] | None = None
    key_cache: int = Field(default=DEFAULT_CACHE, ge=1, le=10_000_000)

    def keks(self, environ: Mapping[str, str] | None = None) -> KeyEncryptionKeys:
        """The key-encryption keys, read now (a one-line :class:`ConfigError` without)."""
        return KeyEncryptionKeys.load(
            self.master_key_env, file=self.master_key_file, environ=environ
        )


class InstanceConfig(Section):
    """Who this process is (``id``: the ``transactional.id`` suffix) and which deployment it
    belongs to (``namespace``: prefixes every consumer group, transactional id and Redis key;
    default: the topic prefix without its trailing dot; DESIGN.md §10)."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")] | None = None
    namespace: Annotated[str, Field(pattern=NAMESPACE_PATTERN)] | None = None
    # Where processes write their listener addresses (for `vigil doctor`); default
    # $VIGIL_STATE, else $XDG_STATE_HOME/vigil, else ~/.local/state/vigil.
    state_dir: Annotated[Path, AfterValidator(lambda p: p.expanduser())] | None = None

    def resolved_id(self) -> str:
        """The stable instance id (``transactional.id`` suffix): configured, else the host."""
        return self.id or socket.gethostname()
