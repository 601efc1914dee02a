"""What every ``vigil`` subcommand shares: the ``--config`` choice and the loaded configuration.

Also carries ``--as-operator``, the explicit choice to act as the configured operator identity
(``pipeline.cli.identity``). The configuration is loaded on first use, so ``vigil --help`` and
commands that need no configuration never read a file. Subcommands take it with ``@pass_state``.

:meth:`CliState.reach_kafka` is what a command that needs the broker calls first.

Left out: the command group (``pipeline.cli.group``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import click

from pipeline.config import VigilConfig, load_config
from pipeline.control.hardening import conceal
from pipeline.kafka import properties
from pipeline.kafka.reach import BrokerInfo, probe_broker

__all__ = ["CliState", "pass_state"]


@dataclass(slots=True)
class CliState:
    config_path: Path | None = None
    as_operator: bool = False  # `vigil --as-operator …`: act as [operator] name
    _config: VigilConfig | None = field(default=None, repr=False)

    @property
    def config(self) -> VigilConfig:
        """The configuration, loaded and validated once (raises ``ConfigError``); every Kafka
        client made afterwards carries its ``[kafka.client]`` properties."""
        if self._config is None:
            config = load_config(self.config_path)
            properties.use(config.kafka.client_properties())
            conceal(config.secret_env_names())  # read: now out of /proc/<pid>/environ
            self._config = config
        return self._config

    def subject(self, tenant: str | None, user: str | None) -> tuple[str, str]:
        """The subject a command names, else ``[subject]`` of the configuration."""
        me = self.config.subject
        return tenant or me.tenant_id, user or me.user_id

    def reach_kafka(self) -> BrokerInfo:
        """Check that the configured broker answers, within seconds: an ``UnavailableError``
        (exit 69, one line naming the address, the key and the fix) rather than a long stall."""
        return probe_broker(self.config.kafka.bootstrap_servers)


pass_state = click.make_pass_decorator(CliState, ensure=True)
