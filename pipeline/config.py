"""``vigil.toml``: the configuration every vigil process shares, validated once and frozen.

DESIGN.md §9. :func:`load_config` finds the file (``--config`` → ``$VIGIL_CONFIG`` →
``./vigil.toml`` → built-in defaults), parses it with ``tomllib``, lays the environment's
``VIGIL_<SECTION>__<KEY>`` variables over it (pydantic-settings; precedence: variables, then the
file, then defaults) and validates the result with pydantic; any error becomes one
:class:`ConfigError` whose lines name the dotted key (``destinations.ops-hook.url: …``).
Secret values are ``SecretStr`` and never printed; credentials themselves stay in the
environment (``*_env`` keys name the variable).

Left out: resolving runtime defaults that depend on the host (the RPC socket directory, the
system time zone) and using the settings; each process does that at its edge.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic_settings import EnvSettingsSource
from pydantic_settings.exceptions import SettingsError

from pipeline.crypto.kek import DEFAULT_ENV as DEFAULT_KEK_ENV
from pipeline.crypto.kek import KeyEncryptionKeys
from pipeline.crypto.ring import DEFAULT_CACHE
from pipeline.kafka.properties import ClientProperties, property_name
from pipeline.kafka.properties import Role as PropertyRole
from pipeline.kafka.properties import check as check_properties
from pipeline.kafka.topics import DEFAULT_PARTITIONS, DEFAULT_PREFIX, Topology
from pipeline.redis.connect import SCHEMES as REDIS_SCHEMES
from pipeline.redis.connect import parse_url as parse_redis_url
from pipeline.rules.authz import Role
from pipeline.rules.budgets import MAX_AMOUNT, BudgetCaps, BudgetCeilings
from pipeline.rules.commands.limits import Limits
from pipeline.rules.durations import parse_duration
from pipeline.rules.errors import ConfigError, DefinitionError
from pipeline.rules.namespace import NAMESPACE_PATTERN, Namespace

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_FILE",
    "ENV_PREFIX",
    "AgentConfig",
    "ApiConfig",
    "BudgetCeilingsConfig",
    "BudgetDefaults",
    "BudgetsConfig",
    "ChatConfig",
    "ConsoleChat",
    "DestinationConfig",
    "InAppDestination",
    "InstanceConfig",
    "KafkaConfig",
    "LimitsConfig",
    "LogDestination",
    "MetricsConfig",
    "OperatorConfig",
    "PrincipalConfig",
    "PrivacyConfig",
    "RedisConfig",
    "RpcConfig",
    "RunConfig",
    "SubjectConfig",
    "TelegramChat",
    "ToolConfig",
    "VigilConfig",
    "WebhookDestination",
    "config_file",
    "env_overrides",
    "load_config",
]

CONFIG_ENV: Final = "VIGIL_CONFIG"
ENV_PREFIX: Final = "VIGIL_"
DEFAULT_FILE: Final = "vigil.toml"


# --- value types -------------------------------------------------------------------------


def _duration(value: object) -> object:
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except DefinitionError as exc:
            raise ValueError(exc.message) from None
    if isinstance(value, timedelta):
        return value
    raise ValueError("expected a duration such as 45s, 90m, 1h30m or 2d")


def _url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host")
    return value


def _listen(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError("expected host:port (a port of 0 picks a free one)")
    return value


def _zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown IANA time zone {value!r}") from None
    return value


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


Duration = Annotated[timedelta, BeforeValidator(_duration)]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Id = Annotated[str, Field(min_length=1, max_length=128)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
UserName = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_.-]{0,31}$")]
Url = Annotated[str, AfterValidator(_url)]
Listen = Annotated[str, AfterValidator(_listen)]
Zone = Annotated[str, AfterValidator(_zone)]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- sections ------------------------------------------------------------------------------


def _properties(role: PropertyRole) -> AfterValidator:
    def check(table: dict[str, Any]) -> dict[str, Any]:
        problems = check_properties(table, role)
        if problems:
            # One message per table; each problem names its key (the value is never echoed).
            raise ValueError("; ".join(f"{key}: {message}" for key, message in problems))
        return table

    return AfterValidator(check)


Properties = dict[str, str | int | float | bool]


class KafkaConfig(_Section):
    """``[kafka]``; ``[kafka.client]``, ``[kafka.producer]`` and ``[kafka.consumer]`` pass
    librdkafka properties through (``pipeline.kafka.properties``: secrets by ``*_env`` only)."""

    bootstrap_servers: str = Field(default="127.0.0.1:9092", min_length=1)
    topic_prefix: str = Field(default=DEFAULT_PREFIX, pattern=r"^[A-Za-z0-9._-]{0,200}$")
    partitions: int = Field(default=DEFAULT_PARTITIONS, ge=1)
    replication_factor: int = Field(default=-1, ge=-1, description="-1: the broker's default")
    group_protocol: Literal["auto", "consumer", "classic"] = Field(
        default="classic",
        description="consumer groups: classic + range, KIP-848 (consumer), or auto (probe)",
    )
    client: Annotated[Properties, Field(max_length=200), _properties("client")] = {}
    producer: Annotated[Properties, Field(max_length=200), _properties("producer")] = {}
    consumer: Annotated[Properties, Field(max_length=200), _properties("consumer")] = {}

    def topology(self) -> Topology:
        return Topology(self.topic_prefix, self.partitions, self.replication_factor)

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


class RedisConfig(_Section):
    url: Annotated[SecretStr, AfterValidator(_redis_url)] = SecretStr("redis://127.0.0.1:6379/0")


class SubjectConfig(_Section):
    """The local user the CLI acts as."""

    tenant_id: Id = "local"
    user_id: Id = "me"
    timezone: Zone | None = None  # None: the system zone


class WebhookDestination(_Section):
    kind: Literal["webhook"]
    url: Url
    secret_env: EnvName | None = None  # the HMAC signing secret's variable
    unsigned: bool = False  # send without a signature: only when said so (fail closed)
    timeout: Duration = timedelta(seconds=10)

    @model_validator(mode="after")
    def _signed(self) -> WebhookDestination:
        if self.secret_env is None and not self.unsigned:
            raise ValueError(
                "a webhook is signed: name its secret's variable in secret_env, or set "
                "unsigned = true to send it without a signature (receivers cannot tell it is "
                "vigil's)"
            )
        if self.secret_env is not None and self.unsigned:
            raise ValueError("unsigned = true and a secret_env: choose one")
        return self


class InAppDestination(_Section):
    kind: Literal["in_app"]


class LogDestination(_Section):
    kind: Literal["log"]


DestinationConfig = Annotated[
    WebhookDestination | InAppDestination | LogDestination, Field(discriminator="kind")
]


class ConsoleChat(_Section):
    kind: Literal["console"]


class TelegramChat(_Section):
    kind: Literal["telegram"]
    api_base: Url = "https://api.telegram.org"
    token_env: EnvName
    chat_id: Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, int) else v)]


ChatConfig = Annotated[ConsoleChat | TelegramChat, Field(discriminator="kind")]


class ToolConfig(_Section):
    """A governed tool instance; ``kind`` pins the implementation (``http.json@v1``)."""

    kind: str = Field(pattern=r"^[a-z][a-z0-9_.-]*@v[0-9]+$")
    url: Url | None = None
    token_env: EnvName | None = None
    timeout: Duration = timedelta(seconds=10)


class AgentConfig(_Section):
    """The agent behind ``prompt``/``query``. ``run_as`` runs it under another local user, whose
    uid the daemon maps to the agent role (DESIGN.md §10); ``env`` names the variables it gets
    beyond PATH, HOME, LANG and TZ (never one of vigil's secrets)."""

    command: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, min_length=1)
    timeout: Duration = timedelta(seconds=120)
    run_as: UserName | None = None
    socket_path: Path | None = None  # with run_as; default /tmp/vigil-agent-<uid>/vigil.sock
    env: tuple[EnvName, ...] = ()


class RunConfig(_Section):
    allow_dir: Annotated[Path, AfterValidator(lambda p: p.expanduser())] = Path(
        "~/.config/vigil/scripts"
    ).expanduser()
    env: tuple[EnvName, ...] = ()  # beyond PATH, HOME, LANG and TZ


class RpcConfig(_Section):
    socket_path: Path | None = None  # None: $XDG_RUNTIME_DIR/vigil.sock


class ApiConfig(_Section):
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


class OperatorConfig(_Section):
    """The operator identity ``vigil --as-operator`` acts as (grants, erasure, other subjects).
    Absent: the CLI has no operator verbs."""

    name: Name | None = None


class LimitsConfig(_Section):
    """What one subject (and one agent session) may hold live (DESIGN.md §10 "Limits")."""

    watchers: int = Field(default=1_000, ge=1)
    proposals: int = Field(default=100, ge=1)
    proposal_ttl: Duration = timedelta(hours=24)
    schedules: int = Field(default=100, ge=1)
    session_schedules: int = Field(default=10, ge=1)

    @model_validator(mode="after")
    def _ttl(self) -> LimitsConfig:
        if not timedelta(minutes=1) <= self.proposal_ttl <= timedelta(days=30):
            raise ValueError("proposal_ttl is between 1m and 30d")
        return self

    def limits(self) -> Limits:
        return Limits(
            watchers=self.watchers,
            proposals=self.proposals,
            proposal_ttl=self.proposal_ttl,
            schedules=self.schedules,
            session_schedules=self.session_schedules,
        )


class MetricsConfig(_Section):
    """Each process's ``/metrics``, ``/healthz`` and ``/readyz`` listener: the host of ``listen``,
    its port plus the process's offset (command-processor +0, evaluator +1, ticker +2,
    delivery +3, daemon +4, api +5) unless ``ports`` names one; a port of 0 picks a free one
    (logged, and written to the state directory). ``max_lag``: records a group may be behind
    and still be ready."""

    listen: Listen = "127.0.0.1:9464"
    ports: dict[
        Literal["command-processor", "evaluator", "ticker", "delivery", "daemon", "api"],
        Annotated[int, Field(ge=0, le=65535)],
    ] = {}
    max_lag: int = Field(default=1_000, ge=0)


class PrincipalConfig(_Section):
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


class BudgetDefaults(_Section):
    """Caps a watcher gets when its definition leaves them out."""

    window: Duration = timedelta(hours=1)
    evaluations: int = Field(default=100_000, ge=0, le=MAX_AMOUNT)
    deliveries: int = Field(default=100, ge=0, le=MAX_AMOUNT)
    attempts: int = Field(default=1_000, ge=0, le=MAX_AMOUNT)
    tokens: int = Field(default=100_000, ge=0, le=MAX_AMOUNT)
    micro_usd: int = Field(default=100_000, ge=0, le=MAX_AMOUNT)

    def caps(self) -> BudgetCaps:
        """These defaults as caps, for watchers that leave some out."""
        return BudgetCaps.model_validate(self.model_dump())


class BudgetCeilingsConfig(_Section):
    """The most any one window may allow, whatever a definition says (``[budgets.ceilings]``,
    DESIGN.md §10); an absent key sets no ceiling for that dimension."""

    evaluations: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    deliveries: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    attempts: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    tokens: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    micro_usd: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)

    def ceilings(self) -> BudgetCeilings:
        return BudgetCeilings.model_validate(self.model_dump())


class BudgetsConfig(_Section):
    defaults: BudgetDefaults = BudgetDefaults()
    ceilings: BudgetCeilingsConfig = BudgetCeilingsConfig()

    @model_validator(mode="after")
    def _defaults_within_ceilings(self) -> BudgetsConfig:
        try:
            self.ceilings.ceilings().check(self.defaults.caps(), "defaults")
        except DefinitionError as exc:
            raise ValueError(f"{exc.field}: {exc.message}") from None
        return self


class PrivacyConfig(_Section):
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


class InstanceConfig(_Section):
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


class VigilConfig(_Section):
    kafka: KafkaConfig = KafkaConfig()
    redis: RedisConfig = RedisConfig()
    subject: SubjectConfig = SubjectConfig()
    destinations: dict[Name, DestinationConfig] = {}
    chats: dict[Name, ChatConfig] = {}
    tools: dict[Name, ToolConfig] = {}
    agent: AgentConfig = AgentConfig()
    run: RunConfig = RunConfig()
    rpc: RpcConfig = RpcConfig()
    api: ApiConfig = ApiConfig()
    metrics: MetricsConfig = MetricsConfig()
    principals: dict[Name, PrincipalConfig] = {}
    budgets: BudgetsConfig = BudgetsConfig()
    instance: InstanceConfig = InstanceConfig()
    operator: OperatorConfig = OperatorConfig()
    limits: LimitsConfig = LimitsConfig()
    privacy: PrivacyConfig = PrivacyConfig()

    @property
    def namespace(self) -> Namespace:
        """The deployment namespace: ``[instance] namespace``, else from the topic prefix."""
        if self.instance.namespace is not None:
            return Namespace(self.instance.namespace)
        return Namespace.of_topic_prefix(self.kafka.topic_prefix)

    @model_validator(mode="after")
    def _targets_unambiguous(self) -> VigilConfig:
        # delivery.target names a destination or a chat: one name, one meaning.
        both = sorted(set(self.destinations) & set(self.chats))
        if both:
            raise ValueError(f"names used by both [destinations] and [chats]: {both}")
        return self

    @model_validator(mode="after")
    def _no_secret_passed_on(self) -> VigilConfig:
        # Agents and scripts never see vigil's secrets (DESIGN.md §10).
        secrets = self.secret_env_names()
        for section, names in (("agent", self.agent.env), ("run", self.run.env)):
            leaked = sorted(n for n in names if n in secrets or n.startswith("VIGIL_"))
            if leaked:
                raise ValueError(
                    f"[{section}] env may not pass vigil's own variables or secrets: {leaked}"
                )
        return self

    def secret_env_names(self) -> frozenset[str]:
        """The variables that hold vigil's secrets: webhook, chat, tool and Kafka credentials."""
        names: set[str] = {CONFIG_ENV}
        for destination in self.destinations.values():
            if isinstance(destination, WebhookDestination) and destination.secret_env:
                names.add(destination.secret_env)
        for chat in self.chats.values():
            if isinstance(chat, TelegramChat):
                names.add(chat.token_env)
        for tool in self.tools.values():
            if tool.token_env:
                names.add(tool.token_env)
        for table in (self.kafka.client, self.kafka.producer, self.kafka.consumer):
            names.update(str(v) for k, v in table.items() if k.endswith("_env"))
        return frozenset(names)


# --- loading -------------------------------------------------------------------------------


def config_file(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Path | None:
    """The file :func:`load_config` reads: ``path``, else ``$VIGIL_CONFIG``, else
    ``./vigil.toml`` when it exists, else none (built-in defaults)."""
    env = os.environ if environ is None else environ
    if path is None and env.get(CONFIG_ENV):
        path = Path(env[CONFIG_ENV])
    if path is None:
        local = (cwd or Path.cwd()) / DEFAULT_FILE
        return local if local.is_file() else None
    return path.expanduser()


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The keys ``VIGIL_<SECTION>__<KEY>`` variables set (``VIGIL_KAFKA__BOOTSTRAP_SERVERS``,
    ``VIGIL_KAFKA__CLIENT__SASL_MECHANISM``), as nested tables; names are case-insensitive.
    Variables that name no section (``VIGIL_CONFIG``, ``VIGIL_MASTER_KEYS``) are not keys."""
    env = dict(os.environ if environ is None else environ)
    try:
        return dict(_Environment(env)())
    except (SettingsError, ValueError) as exc:
        raise ConfigError(f"environment: invalid {ENV_PREFIX}* variable: {exc}") from None


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping (tests pass their own)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._given = environ
        super().__init__(
            VigilConfig,  # type: ignore[arg-type]  # only its fields are read
            case_sensitive=False,
            env_prefix=ENV_PREFIX,
            env_nested_delimiter="__",
        )

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {name.lower(): value for name, value in self._given.items()}


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> VigilConfig:
    """The configuration: built-in defaults, under the file (``path``, else ``$VIGIL_CONFIG``,
    else ``./vigil.toml``), under ``VIGIL_<SECTION>__<KEY>`` variables. A file named
    explicitly (argument or variable) must exist."""
    found = config_file(path, environ=environ, cwd=cwd)
    data: dict[str, Any] = {}
    source = "defaults"
    if found is not None:
        try:
            data = tomllib.loads(found.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{found}: no such configuration file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{found}: cannot read: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{found}: not valid TOML: {exc}") from None
        source = str(found)
    overrides = env_overrides(environ)
    if overrides:
        data = _deep_merge(data, overrides)
        source = f"{source} with {ENV_PREFIX}* variables"
    return parse_config(data, source=source)


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            merged[key] = _deep_merge(below, value)
        else:
            merged[key] = value
    return merged


_log = logging.getLogger("vigil.config")


def parse_config(data: Mapping[str, Any], source: str = "configuration") -> VigilConfig:
    """Validate already-parsed TOML data. A stale ``[[schedule]]`` table (the old static schedule
    file's) is ignored with one warning line: schedules are records now, never configuration."""
    if isinstance(data.get("schedule"), list):
        data = {key: value for key, value in data.items() if key != "schedule"}
        _log.warning(
            "%s: [[schedule]] is ignored: schedules are records now; "
            "create them with `vigil schedule` (docs/operations.md#upgrades)",
            source,
        )
    try:
        return VigilConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"  {_key(error['loc'], data)}: {_message(error)}" for error in exc.errors()]
        raise ConfigError(f"{source}: invalid configuration\n" + "\n".join(lines)) from None


def _key(loc: tuple[int | str, ...], data: Mapping[str, Any]) -> str:
    """The dotted key a pydantic location points at, without union tags and validator names."""
    parts: list[str] = []
    node: Any = data
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(node, Mapping) and part in node:
            parts.append(str(part))
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int):
            parts.append(f"[{part}]")
            node = node[part] if part < len(node) else None
        elif last and isinstance(part, str) and part != "[key]" and "[" not in part:
            parts.append(part)  # a missing key
        # else: a discriminator tag or a validator's name, not a key of the file
    return ".".join(parts).replace(".[", "[") or "(top level)"


def _message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")
