"""The control-plane verbs as ``vigil`` subcommands: ``send``, ``prompt``, ``query``, ``run``,
``schedule``, ``list``, ``cancel`` (seed 001, DESIGN.md §5).

Each builds one request, sends it over the daemon's socket (``--socket`` → ``$VIGIL_SOCKET`` →
``[rpc] socket_path`` → default), prints the answer and exits 0, 1 on a refusal (``Error: …``) or 2
on usage. The chat is ``--chat``, else ``$VIGIL_CHAT_ID``; ``$VIGIL_AGENT_TOKEN`` goes with every
request. Left out: what the verbs do (``pipeline.control.core``)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import click

from pipeline.cli.completion_cmd import complete_schedule_names
from pipeline.cli.context import CliState, pass_state
from pipeline.control.agent import ENV_AGENT_TOKEN, ENV_CHAT_ID
from pipeline.control.socket.client import call
from pipeline.control.socket.server import SOCKET_ENV, default_socket_path
from pipeline.control.verbs import ScheduleRequest, VerbResponse
from pipeline.rules.errors import DefinitionError

__all__ = ["LIST_COLUMNS", "cancel", "list_schedules", "prompt", "query", "run", "schedule", "send"]

LIST_COLUMNS: Final = ("NAME", "NEXT FIRE", "WHEN", "COMMAND")  # `vigil list`'s table

F = TypeVar("F", bound=Callable[..., Any])


def _socket_option(func: F) -> F:
    return click.option(
        "--socket",
        "socket_path",
        type=click.Path(path_type=Path, dir_okay=False),
        help="The daemon's socket (default: $VIGIL_SOCKET, [rpc] socket_path, "
        "$XDG_RUNTIME_DIR/vigil.sock).",
    )(func)


def _chat_option(func: F) -> F:
    return click.option(
        "--chat",
        help="Target chat, a [chats.NAME] of vigil.toml (default: $VIGIL_CHAT_ID, "
        "else the only configured chat).",
    )(func)


def _json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print the raw JSON result.")(func)


def _request(state: CliState, socket_path: Path | None, body: dict[str, Any]) -> dict[str, Any]:
    """Send ``body`` to the daemon; the result on success, else ``Error: …`` and exit 1."""
    if socket_path is None and not os.environ.get(SOCKET_ENV):
        path = default_socket_path(None, state.config.rpc.socket_path)
    else:
        path = default_socket_path(socket_path)
    token = os.environ.get(ENV_AGENT_TOKEN)
    if token:
        body["token"] = token
    response: VerbResponse = call(path, body)
    if not response.ok or response.error is not None:
        error = response.error
        message = "the daemon refused the request" if error is None else error.message
        if error is not None and error.field and error.field not in message:
            message = f"{error.field}: {message}"
        raise click.ClickException(message)
    return response.result or {}


def _chat(chat: str | None) -> str | None:
    return chat or os.environ.get(ENV_CHAT_ID) or None


def _text(words: tuple[str, ...]) -> str:
    text = " ".join(words)
    if not text.strip():
        raise click.UsageError("give the text to send")
    return text


def _answer(result: dict[str, Any], as_json: bool, line: Callable[[dict[str, Any]], str]) -> None:
    """Print the daemon's result: the raw JSON with ``--json``, else ``line`` of it."""
    click.echo(json.dumps(result, ensure_ascii=False, indent=2) if as_json else line(result))


@click.command(short_help='Deliver text to a chat now: vigil send "deploy done"')
@click.argument("words", nargs=-1, required=True)
@_chat_option
@_socket_option
@_json_option
@pass_state
def send(
    state: CliState,
    words: tuple[str, ...],
    chat: str | None,
    socket_path: Path | None,
    as_json: bool,
) -> None:
    """Deliver TEXT verbatim to a chat now (no agent involved).

    \b
    Example:
      vigil send "deploy finished"
      vigil send --chat ops "disk at 91%"
    """
    result = _request(
        state, socket_path, {"verb": "send", "text": _text(words), "chat": _chat(chat)}
    )
    _answer(result, as_json, lambda r: f"sent to chat {r['chat']}")


@click.command(short_help='Ask the agent, deliver its answer: vigil prompt "digest"')
@click.argument("words", nargs=-1, required=True)
@_chat_option
@_socket_option
@_json_option
@pass_state
def prompt(
    state: CliState,
    words: tuple[str, ...],
    chat: str | None,
    socket_path: Path | None,
    as_json: bool,
) -> None:
    """Ask the agent ([agent] command) and deliver its answer to a chat.

    The agent runs in a fresh process (an ephemeral session): your live conversation is never
    touched.

    \b
    Example:
      vigil prompt "summarise today's open incidents"
    """
    body = {"verb": "prompt", "text": _text(words), "chat": _chat(chat)}
    result = _request(state, socket_path, body)
    _answer(result, as_json, lambda r: f"the agent's answer was sent to chat {r['chat']}")


@click.command(short_help='Ask the agent, print its answer: vigil query "status?"')
@click.argument("words", nargs=-1, required=True)
@_chat_option
@_socket_option
@_json_option
@pass_state
def query(
    state: CliState,
    words: tuple[str, ...],
    chat: str | None,
    socket_path: Path | None,
    as_json: bool,
) -> None:
    """Ask the agent and print its answer here; nothing is delivered to any chat.

    \b
    Example:
      vigil query "what did I note about the deploy?" > answer.txt
    """
    body = {"verb": "query", "text": _text(words), "chat": _chat(chat)}
    result = _request(state, socket_path, body)
    _answer(result, as_json, lambda r: r["answer"])


@click.command(
    context_settings={"ignore_unknown_options": True},
    short_help="Start an allowlisted script: vigil run backup.sh",
)
@click.argument("script")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@_chat_option
@_socket_option
@_json_option
@pass_state
def run(
    state: CliState,
    script: str,
    args: tuple[str, ...],
    chat: str | None,
    socket_path: Path | None,
    as_json: bool,
) -> None:
    """Start SCRIPT (inside [run] allow_dir) in the daemon, fire and forget.

    The script gets VIGIL_CHAT_ID, VIGIL_SOCKET and VIGIL_DELIVERY_KEY in its environment (and
    VIGIL_SCHEDULE_NAME, VIGIL_SCHEDULE_TIME when a schedule fires it). A bare name is looked up
    in the allowlist directory; anything outside it is refused.

    \b
    Example:
      vigil run backup.sh --full
    """
    result = _request(
        state, socket_path, {"verb": "run", "args": [_script(script), *args], "chat": _chat(chat)}
    )
    _answer(result, as_json, lambda r: f"started {r['script']} (pid {r['pid']})")


def _script(script: str) -> str:
    """A path with a slash is the caller's (made absolute here); a bare name is the allowlist's."""
    return str(Path(script).absolute()) if "/" in script else script


@click.command(
    context_settings={"ignore_unknown_options": True},
    short_help='Later or on a cron: vigil schedule --in 1h -- send "stretch"',
)
@click.option(
    "--in", "in_", metavar="DURATION", help="Fire once after DURATION (45s, 90m, 1h30m, 2d)."
)
@click.option(
    "--at", metavar="TIME", help="Fire once at TIME (2026-12-01T08:00 local, or RFC 3339)."
)
@click.option("--cron", metavar="EXPR", help='Fire on a five-field cron, local time ("0 8 * * *").')
@click.option("--name", help="Name it, to list, update or cancel it later (default: a handle).")
@click.option("--update", is_flag=True, help="Replace the schedule of this name (or create it).")
@click.argument(
    "argv", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- VERB [ARGS]..."
)
@_chat_option
@_socket_option
@_json_option
@pass_state
def schedule(
    state: CliState,
    in_: str | None,
    at: str | None,
    cron: str | None,
    name: str | None,
    update: bool,
    argv: tuple[str, ...],
    chat: str | None,
    socket_path: Path | None,
    as_json: bool,
) -> None:
    """Run send, prompt or run later: once (--in, --at) or on a cron (--cron).

    Give exactly one of --in, --at, --cron, then `--` and the verb to run. The target chat is
    frozen now. Names are unique per chat: reusing one is an error unless --update. A one-shot
    whose time passes while vigil is down fires late, flagged late; a cron resumes at its next
    time.

    \b
    Examples:
      vigil schedule --in 1h -- prompt "remind me to check the deploy"
      vigil schedule --cron "0 8 * * *" --name digest -- prompt "morning digest"
      vigil schedule --at 2026-12-01T08:00 --name renew -- send "renew the certificate"
      vigil schedule --in 30m -- run backup.sh
    """
    inner = list(argv)
    if inner and inner[0] == "run" and len(inner) > 1:
        inner[1] = _script(inner[1])
    try:
        request = ScheduleRequest.model_validate(
            {
                "in": in_,
                "at": at,
                "cron": cron,
                "name": name,
                "update": update,
                "argv": inner,
                "chat": _chat(chat),
            }
        )
    except DefinitionError as exc:
        raise click.UsageError(str(exc)) from None
    except ValueError as exc:  # pydantic's ValidationError
        raise click.UsageError(str(exc).splitlines()[-1].strip()) from None
    body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    result = _request(state, socket_path, body)
    _answer(result, as_json, _scheduled)


def _scheduled(result: dict[str, Any]) -> str:
    verb = "updated" if result.get("updated") else "scheduled"
    return (
        f"{verb} {result['name']} in chat {result['chat']}: "
        f"{_command_text(result['argv'])}, next at {result['next_fire']}"
    )


@click.command("list", short_help="List a chat's schedules: vigil list --json")
@_chat_option
@_socket_option
@_json_option
@pass_state
def list_schedules(
    state: CliState, chat: str | None, socket_path: Path | None, as_json: bool
) -> None:
    """List a chat's pending schedules: a table of name, next fire, timing and command, one
    row per live schedule (--json: name, chat, schedule, argv, created_at, next_fire).

    \b
    Example:
      vigil list
      vigil list --json --chat ops
    """
    result = _request(state, socket_path, {"verb": "list", "chat": _chat(chat)})
    entries: list[dict[str, Any]] = result.get("schedules", [])
    if as_json:
        click.echo(json.dumps(entries, ensure_ascii=False, indent=2))
        return
    if not entries:
        click.echo(f"no schedules in chat {result['chat']}")
        return
    rows = [LIST_COLUMNS]
    for entry in entries:
        rows.append(
            (
                entry["name"],
                entry["next_fire"] or "-",
                _when(entry["schedule"]),
                _command_text(entry["argv"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[3]
        )


@click.command(short_help="Cancel a schedule: vigil cancel --name digest")
@click.option(
    "--name", required=True, shell_complete=complete_schedule_names, help="The schedule to cancel."
)
@_chat_option
@_socket_option
@_json_option
@pass_state
def cancel(
    state: CliState, name: str, chat: str | None, socket_path: Path | None, as_json: bool
) -> None:
    """Cancel a schedule by name (exits 1 when the chat has no such schedule).

    \b
    Example:
      vigil cancel --name digest
    """
    result = _request(state, socket_path, {"verb": "cancel", "name": name, "chat": _chat(chat)})
    _answer(result, as_json, lambda r: f"cancelled {r['name']} in chat {r['chat']}")


def _when(schedule: dict[str, Any]) -> str:
    """A schedule's timing as ``list`` shows it: the cron and its zone, or the one instant."""
    if schedule.get("cron"):
        return f"{schedule['cron']} ({schedule.get('timezone') or 'UTC'})"
    return str(schedule.get("at", ""))


def _command_text(argv: list[str]) -> str:
    return " ".join(json.dumps(word, ensure_ascii=False) if " " in word else word for word in argv)
