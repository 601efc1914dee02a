""":class:`VigilConfig`: the whole of ``vigil.toml``, its sections and the rules that span them
(one name per target, no secret passed on to agents and scripts, the deployment namespace).
Reading the file and the environment is ``loading``'s.
"""

from __future__ import annotations

from typing import Final

from pydantic import (
    Field,
    model_validator,
)

from pipeline.config.budgets import BudgetsConfig
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
    DestinationConfig,
    TelegramChat,
    ToolConfig,
    WebhookDestination,
)
from pipeline.config.values import Name, Section
from pipeline.rules.namespace import Namespace

__all__ = ["CONFIG_ENV", "VigilConfig"]

CONFIG_ENV: Final = "VIGIL_CONFIG"


class VigilConfig(Section):
    kafka: KafkaConfig = KafkaConfig()
    redis: RedisConfig = RedisConfig()
    subject: SubjectConfig = SubjectConfig()
    destinations: dict[Name, DestinationConfig] = Field(default_factory=dict)
    chats: dict[Name, ChatConfig] = Field(default_factory=dict)
    tools: dict[Name, ToolConfig] = Field(default_factory=dict)
    agent: AgentConfig = AgentConfig()
    run: RunConfig = RunConfig()
    rpc: RpcConfig = RpcConfig()
    api: ApiConfig = ApiConfig()
    metrics: MetricsConfig = MetricsConfig()
    principals: dict[Name, PrincipalConfig] = Field(default_factory=dict)
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
    def _one_principal_per_token(self) -> VigilConfig:
        # A token names one principal: a second with the same digest would be silently shadowed.
        seen: dict[str, str] = {}
        for name, principal in self.principals.items():
            digest = principal.token_sha256.get_secret_value()
            if digest in seen:
                raise ValueError(
                    f"[principals.{seen[digest]}] and [principals.{name}] have the same "
                    "token_sha256: a token authenticates one principal"
                )
            seen[digest] = name
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
        """The variables that hold vigil's secrets: the key-encryption keys, webhook, chat, tool
        and Kafka credentials."""
        names: set[str] = {CONFIG_ENV, self.privacy.master_key_env}
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
