"""What every ``vigil`` subcommand shares: the ``--config`` choice and the loaded configuration.

Also carries ``--as-operator``, the explicit choice to act as the configured operator identity
(``pipeline.cli.identity``). The configuration is loaded on first use, so ``vigil --help`` and
commands that need no configuration never read a file. Subcommands take it with ``@pass_state``.

Left out: the command group and its registry (``pipeline.cli.main``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import click

from pipeline.config import VigilConfig, load_config

__all__ = ["CliState", "pass_state"]


@dataclass(slots=True)
class CliState:
    config_path: Path | None = None
    as_operator: bool = False  # `vigil --as-operator …`: act as [operator] name
    _config: VigilConfig | None = field(default=None, repr=False)

    @property
    def config(self) -> VigilConfig:
        """The configuration, loaded and validated once (raises ``ConfigError``)."""
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config


pass_state = click.make_pass_decorator(CliState, ensure=True)
