"""The ``vigil`` command group: subcommands imported only when run, and the exit codes.

Owns :class:`_LazyGroup` and the exit codes: 0 done, 1 refused (a :class:`VigilError`), 2 usage,
69 unavailable (:class:`UnavailableError`), 130 interrupted; with ``--json`` the error is
``{"error": {"code", "message"}}`` on stderr. Left out: the process's first steps and the table
of subcommands (``pipeline.cli.main``), the commands and configuration loading."""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Final

import click

from pipeline.cli.context import CliState
from pipeline.cli.main import COMMANDS
from pipeline.cli.options import CONTEXT_SETTINGS, spread_from
from pipeline.rules.errors import UnavailableError, VigilError

__all__ = ["EXIT_INTERRUPTED", "EXIT_UNAVAILABLE", "vigil"]

EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNAVAILABLE: Final = 69  # sysexits.h EX_UNAVAILABLE
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, as shells report it
_JSON_FLAG: Final = "vigil.json"


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
        spread_from(self, command)  # `vigil watch create --config F` works too
        return command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_JSON_FLAG] = _asks_json(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        as_json = bool(ctx.meta.get(_JSON_FLAG))
        try:
            return super().invoke(ctx)
        except UnavailableError as exc:
            raise _Failure(str(exc), "unavailable", EXIT_UNAVAILABLE, as_json) from exc
        except VigilError as exc:
            raise _Failure(str(exc), "refused", EXIT_REFUSED, as_json) from exc
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        except click.Abort as exc:  # a declined prompt is a refusal; Ctrl-C at one is not
            if not isinstance(exc.__context__, KeyboardInterrupt):
                raise
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        except click.ClickException as exc:
            if not as_json or isinstance(exc, _Failure):
                raise
            code = "usage" if isinstance(exc, click.UsageError) else "refused"
            raise _Failure(exc.format_message(), code, exc.exit_code, as_json) from exc


class _Failure(click.ClickException):
    """One error line with its exit code: ``Error: …``, or a JSON object under ``--json``."""

    def __init__(self, message: str, code: str, exit_code: int, as_json: bool) -> None:
        super().__init__(message)
        self.code = code
        self.exit_code = exit_code  # type: ignore[misc]  # click reads it per instance
        self.as_json = as_json

    def show(self, file: IO[Any] | None = None) -> None:
        if self.as_json:
            body = {"error": {"code": self.code, "message": self.message}}
            click.echo(json.dumps(body, ensure_ascii=False), err=True)
        else:
            click.echo(f"Error: {self.message}", err=True)


def _asks_json(args: Sequence[str]) -> bool:
    """Whether ``--json`` is among the options (not after ``--``, where a verb's text is)."""
    head = args[: args.index("--")] if "--" in args else args
    return "--json" in head


@click.group(cls=_LazyGroup, context_settings=CONTEXT_SETTINGS)
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
    erase, --subject TENANT/USER for another subject) need --as-operator and an [operator]
    identity. Options may follow the subcommand (vigil watch create -f F --timeout 5).
    Documentation: docs/ (definitions.md has every field of a watcher).

    \b
    Example:
      vigil watch validate examples/*.json

    \b
    Exit codes:
      0    done
      1    refused (invalid input, denied, not found, a failed operation)
      2    usage (an unknown command or option)
      69   unavailable (the Kafka broker or Redis does not answer)
      130  interrupted (Ctrl-C)
    With --json, an error is one JSON object on stderr: {"error": {"code", "message"}}.
    """
    ctx.obj = CliState(config_path, as_operator)
