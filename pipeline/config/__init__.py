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

from pipeline.config.budgets import DEFAULT_CAPS, BudgetsConfig
from pipeline.config.loading import (
    DEFAULT_FILE,
    ENV_PREFIX,
    config_file,
    env_overrides,
    load_config,
    parse_config,
)
from pipeline.config.model import CONFIG_ENV, VigilConfig
from pipeline.config.sections import (
    AgentConfig,
    ApiConfig,
    InstanceConfig,
    KafkaConfig,
    LimitsConfig,
    MetricsConfig,
    OperatorConfig,
    PrincipalConfig,
    PrivacyConfig,
    RedisConfig,
    RpcConfig,
    RunConfig,
    SubjectConfig,
)
from pipeline.config.targets import (
    ChatConfig,
    ConsoleChat,
    DestinationConfig,
    InAppDestination,
    LogDestination,
    TelegramChat,
    ToolConfig,
    WebhookDestination,
)

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CAPS",
    "DEFAULT_FILE",
    "ENV_PREFIX",
    "AgentConfig",
    "ApiConfig",
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
    "parse_config",
]
