"""``vigil.toml``: the configuration every vigil process shares, validated once and frozen (§9).

Owns :func:`load_config` (``--config`` → ``$VIGIL_CONFIG`` → ``./vigil.toml`` → defaults;
``VIGIL_<SECTION>__<KEY>`` variables over the file; any error one :class:`ConfigError` naming the
dotted key; secrets ``SecretStr``, never printed). Leaves out host-dependent defaults (the
socket directory, the system zone) and using the settings: each process does that at its edge.
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
