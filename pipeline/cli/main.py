"""The ``vigil`` command group and the registry of its subcommands.

A subcommand lives in its own module and is registered here with one line in
:data:`COMMANDS` (``"name": "module:attribute"``); modules are imported only when their
command runs, so ``vigil --help`` stays fast and one broken module cannot break the others.
Every :class:`VigilError` a command lets escape is printed as ``Error: …`` with exit code 1.

Left out: the commands themselves and configuration loading (``pipeline.config``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Final

import click

from pipeline.cli import shutdown
from pipeline.cli.context import CliState
from pipeline.rules.errors import VigilError

__all__ = ["COMMANDS", "main", "vigil"]

COMMANDS: Final[dict[str, str]] = {
    "publish": "pipeline.cli.publish_cmd:publish",
    "topics": "pipeline.cli.topics_cmd:topics",
    "watch": "pipeline.cli.watch_cmd:watch",
    "grant": "pipeline.cli.grant_cmd:grant",
    "erase": "pipeline.cli.erase_cmd:erase",
    "command-processor": "pipeline.cli.command_processor_cmd:command_processor",
    "delivery": "pipeline.cli.delivery_cmd:delivery",
    "evaluator": "pipeline.cli.evaluator_cmd:evaluator",
    "ticker": "pipeline.cli.ticker_cmd:ticker",
    "daemon": "pipeline.cli.daemon_cmd:daemon",
    "send": "pipeline.cli.verbs_cmd:send",
    "prompt": "pipeline.cli.verbs_cmd:prompt",
    "query": "pipeline.cli.verbs_cmd:query",
    "run": "pipeline.cli.verbs_cmd:run",
    "schedule": "pipeline.cli.verbs_cmd:schedule",
    "list": "pipeline.cli.verbs_cmd:list_schedules",
    "cancel": "pipeline.cli.verbs_cmd:cancel",
    "api": "pipeline.cli.api_cmd:api",
    "mcp": "pipeline.cli.api_cmd:mcp",
    "replay": "pipeline.cli.replay_cmd:replay_command",
    "explain": "pipeline.cli.explain_cmd:explain",
    "deliveries": "pipeline.cli.deliveries_cmd:deliveries",
    "dev": "pipeline.cli.dev_cmd:dev",
    "keys": "pipeline.cli.keys_cmd:keys",
}


class _LazyGroup(click.Group):
    """A group that imports a subcommand's module only when it is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except VigilError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_LazyGroup)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="vigil.toml to use (default: $VIGIL_CONFIG, then ./vigil.toml, then built-in defaults).",
)
@click.option(
    "--as-operator",
    is_flag=True,
    help="Act as the [operator] identity of vigil.toml: grants, erasure, other subjects.",
)
@click.version_option(package_name="vigil")
@click.pass_context
def vigil(ctx: click.Context, config_path: Path | None, as_operator: bool) -> None:
    """Governed watchers, agent watches and schedules on Apache Kafka.

    The CLI acts as the configured [subject] (a user); operator verbs (vigil grant, vigil
    erase, --tenant/--user for another subject) need --as-operator and an [operator] identity.
    """
    ctx.obj = CliState(config_path, as_operator)


def main() -> None:
    shutdown.arm(sys.argv[1:], tuple(COMMANDS))
    vigil(prog_name="vigil")


if __name__ == "__main__":
    main()
