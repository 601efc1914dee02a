"""``vigil completion bash|zsh|fish`` and what completers share.

The script is click's own completion (``_VIGIL_COMPLETE``). Schedule names complete from the local
daemon (here), watcher ids from the command processor (``round_trip.complete_watcher_ids``), each
within :data:`ASK_TIMEOUT_S`; with vigil not running nothing completes, and a completer never fails
the shell. Left out: the commands that use the completers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import click
from click.shell_completion import CompletionItem, get_completion_class

from pipeline.cli.context import CliState
from pipeline.control.socket.client import call
from pipeline.control.socket.server import SOCKET_ENV, default_socket_path

__all__ = ["ASK_TIMEOUT_S", "cli_state", "complete_schedule_names", "completion", "matching"]

ASK_TIMEOUT_S: Final = 2.0
SHELLS: Final = ("bash", "zsh", "fish")


def cli_state(ctx: click.Context) -> CliState:
    """The CLI state for a completion: click does not run the group callbacks then, so the
    ``--config`` given so far is read from the root's parsed parameters."""
    found = ctx.find_object(CliState)
    if found is not None:
        return found
    config_path = ctx.find_root().params.get("config_path")
    return CliState(config_path if isinstance(config_path, Path) else None)


def matching(names: list[str], incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(name) for name in sorted(set(names)) if name.startswith(incomplete)]


def complete_schedule_names(
    ctx: click.Context, _param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The schedule names of the chat, from the local daemon; none when it is not running."""
    try:
        state = cli_state(ctx)
        socket_path = ctx.params.get("socket_path")
        if socket_path is None and not os.environ.get(SOCKET_ENV):
            path = default_socket_path(None, state.config.rpc.socket_path)
        else:
            path = default_socket_path(socket_path)
        body: dict[str, Any] = {"verb": "list", "chat": ctx.params.get("chat")}
        response = call(path, body, timeout_s=ASK_TIMEOUT_S)
        entries = (response.result or {}).get("schedules", [])
        return matching([str(e["name"]) for e in entries], incomplete)
    except Exception:  # a completer completes nothing rather than break the shell
        return []


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL. Commands and options complete from vigil itself;
    watcher ids (vigil watch show, pause, …) from the command processor and schedule names
    (vigil cancel --name) from the daemon, when they are running.

    \b
    Example:
      eval "$(vigil completion bash)"            # in ~/.bashrc
      vigil completion zsh > ~/.zfunc/_vigil     # with fpath+=(~/.zfunc) in ~/.zshrc
      vigil completion fish > ~/.config/fish/completions/vigil.fish
    """
    completer = get_completion_class(shell)
    if completer is None:  # pragma: no cover - click ships all three
        raise click.UsageError(f"no completion for {shell}")
    root = ctx.find_root().command
    click.echo(completer(root, {}, "vigil", "_VIGIL_COMPLETE").source())
