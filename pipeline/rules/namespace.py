"""The deployment namespace: the one name that keeps deployments sharing a Kafka cluster or a Redis
apart (DESIGN.md §10 "Deployment namespace").

``[instance] namespace`` (default: the topic prefix without its dot, else ``vigil``) prefixes
every consumer group (``<namespace>.<stage>``), hence every transactional id, and every Redis
key. Leaves out where the name comes from (``pipeline.config``) and the key layout
(``pipeline.redis.budgets``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from pipeline.rules.errors import ConfigError

__all__ = ["DEFAULT_NAMESPACE", "NAMESPACE_PATTERN", "Namespace"]

DEFAULT_NAMESPACE: Final = "vigil"
NAMESPACE_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_VALID: Final = re.compile(NAMESPACE_PATTERN)


@dataclass(frozen=True, slots=True)
class Namespace:
    """One deployment's name and the names derived from it."""

    name: str = DEFAULT_NAMESPACE

    def __post_init__(self) -> None:
        if len(self.name) > 64 or not _VALID.fullmatch(self.name):
            raise ConfigError(
                "instance.namespace: expected 1-64 of A-Z a-z 0-9 . _ - (starting alphanumeric)"
            )

    @classmethod
    def of_topic_prefix(cls, topic_prefix: str) -> Namespace:
        """The default: the topic prefix without its trailing dot (``vigil.`` → ``vigil``)."""
        # A prefix that is no name as it stands (a leading dot, over 64 characters) keeps its
        # characters, less those that may not start a name, cut to 64.
        name = topic_prefix.removesuffix(".").lstrip("._-")[:64]
        return cls(name or DEFAULT_NAMESPACE)

    def group(self, stage: str) -> str:
        """The consumer group of one stage (``vigil.evaluator``); its members' transactional
        ids are ``<group>-<instance>``."""
        return f"{self.name}.{stage}"

    @property
    def redis_prefix(self) -> str:
        """What every Redis key of this deployment starts with."""
        return f"{self.name}:"

    @property
    def budget_prefix(self) -> str:
        """What every budget key starts with (``pipeline.redis.budgets`` lays out the rest)."""
        return f"{self.redis_prefix}budget:"
