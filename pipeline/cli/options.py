"""One option grammar for every ``vigil`` command.

Owns :func:`spread_group_options` (a group's options also follow its subcommands; a command's own
option of that name wins), :func:`subject_option` (``--subject TENANT/USER``), ``-h``
(:data:`CONTEXT_SETTINGS`), ``--group-protocol`` (:func:`group_protocol_option`,
:func:`chosen_group_protocol`) and ``-v``/``--log-level`` (:func:`chosen_level`). Left out: the
commands and what the options mean to them."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, Final, TypeVar

import click

from pipeline.cli.context import CliState
from pipeline.control.client import DEFAULT_TIMEOUT_S

__all__ = [
    "CONTEXT_SETTINGS",
    "LOG_LEVELS",
    "chosen_group_protocol",
    "chosen_level",
    "group_protocol_option",
    "log_level_option",
    "parse_subject",
    "spread_from",
    "spread_group_options",
    "subject_option",
    "timeout_option",
    "verbose_option",
]

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS: Final[dict[str, Any]] = {"help_option_names": ["-h", "--help"]}
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
_LEVEL_KEY: Final = "vigil.log_level"
_PROTOCOL_KEY: Final = "vigil.group_protocol"
GROUP_PROTOCOLS: Final = ("auto", "consumer", "classic")
_SPREAD_MARK: Final = "_vigil_spread"


def _set_timeout(ctx: click.Context, value: Any) -> None:
    ctx.find_root().meta["vigil.timeout"] = value


def _set_config(ctx: click.Context, value: Any) -> None:
    ctx.ensure_object(CliState).config_path = value


def _set_operator(ctx: click.Context, value: Any) -> None:
    ctx.ensure_object(CliState).as_operator = True


_APPLY: Final[dict[str, tuple[Callable[[click.Context, Any], None], bool]]] = {
    # option name → (how a copy applies its value, whether the copy is hidden in --help)
    "timeout": (_set_timeout, False),
    "config_path": (_set_config, True),
    "as_operator": (_set_operator, True),
}


def _copy(option: click.Option) -> click.Option:
    apply, hidden = _APPLY[option.name or ""]

    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is not None and value is not False:
            apply(ctx, value)

    return click.Option(
        option.opts,
        type=None if option.is_flag else option.type,
        is_flag=option.is_flag,
        default=False if option.is_flag else None,
        expose_value=False,
        callback=callback,
        help=option.help,
        hidden=hidden,
    )


def spread_group_options(command: click.Command, inherited: tuple[click.Option, ...] = ()) -> None:
    """Give every command under ``command`` the options of the groups above it (once)."""
    if getattr(command, _SPREAD_MARK, False):
        return
    setattr(command, _SPREAD_MARK, True)
    if isinstance(command, click.Group):
        own = tuple(p for p in command.params if isinstance(p, click.Option) and p.name in _APPLY)
        for sub in command.commands.values():
            spread_group_options(sub, (*inherited, *own))
        return
    names = {p.name for p in command.params}
    flags = {opt for p in command.params for opt in p.opts}
    for option in inherited:
        if option.name not in names and not flags.intersection(option.opts):
            command.params.append(_copy(option))


def spread_from(group: click.Group, command: click.Command) -> None:
    """Give ``command`` (a subcommand of ``group``) and everything under it ``group``'s options."""
    own = tuple(p for p in group.params if isinstance(p, click.Option) and p.name in _APPLY)
    spread_group_options(command, own)


def timeout_option(command: F) -> F:
    """``--timeout S`` of the commands that wait for the command processor's answer (one
    definition; the command stores it where ``round_trip`` reads it, and it spreads to
    subcommands like the other group options)."""
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        help="Seconds to wait for the command processor's answer.",
    )(command)


def parse_subject(text: str) -> tuple[str, str]:
    """``tenant/user`` or the JSON array ``["tenant","user"]``; :class:`click.BadParameter`
    otherwise."""
    text = text.strip()
    parts: Any
    if text.startswith("["):
        try:
            parts = json.loads(text)
        except ValueError:
            parts = None
    else:
        parts = text.split("/")
    if (
        not isinstance(parts, list)
        or len(parts) != 2
        or not all(isinstance(p, str) and p for p in parts)
    ):
        raise click.BadParameter('write TENANT/USER (or ["tenant","user"])', param_hint="--subject")
    return parts[0], parts[1]


def subject_option(*, required: bool = False, help: str) -> Callable[[F], F]:
    """``--subject TENANT/USER`` (hidden aliases ``--tenant``/``--user``), passed on to the
    command as ``tenant`` and ``user``; ``required`` refuses a command without a subject."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def wrapper(
            *args: Any,
            subject: str | None,
            tenant: str | None,
            user: str | None,
            **kwargs: Any,
        ) -> Any:
            if subject is not None:
                if tenant is not None or user is not None:
                    raise click.UsageError("give --subject, or --tenant with --user, not both")
                tenant, user = parse_subject(subject)
            elif (tenant is None) != (user is None):
                raise click.UsageError("--tenant and --user go together (or --subject T/U)")
            if required and tenant is None:
                raise click.UsageError("name the subject: --subject TENANT/USER")
            return command(*args, tenant=tenant, user=user, **kwargs)

        decorated = click.option("--user", hidden=True, help="Old form of --subject.")(wrapper)
        decorated = click.option("--tenant", hidden=True, help="Old form of --subject.")(decorated)
        decorated = click.option("--subject", metavar="TENANT/USER", help=help)(decorated)
        return decorated  # type: ignore[return-value]

    return decorate


def _remember_verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_root().meta.setdefault(_LEVEL_KEY + ".verbose", True)


def _remembered_choice(flag: str, choices: tuple[str, ...], key: str, help: str) -> Any:
    """An option whose value is kept in the root context's ``meta[key]`` (not passed on)."""

    def remember(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is not None:
            ctx.find_root().meta[key] = value

    return click.option(
        flag, type=click.Choice(choices), expose_value=False, callback=remember, help=help
    )


def log_level_option(command: F) -> F:
    """``--log-level debug|info|warning|error`` for a process that has ``-v`` only."""
    option = _remembered_choice(
        "--log-level", LOG_LEVELS, _LEVEL_KEY, "Log at this level (wins over -v)."
    )
    return option(command)  # type: ignore[no-any-return]


def verbose_option(command: F) -> F:
    """``-v/--verbose`` (log at INFO) for a process that has ``--log-level`` only."""
    return click.option(
        "-v",
        "--verbose",
        is_flag=True,
        expose_value=False,
        callback=_remember_verbose,
        help="Log at INFO (the same as --log-level info).",
    )(command)


def chosen_level(default: str) -> str:
    """The level to log at: ``--log-level`` when given, else INFO with ``-v``, else
    ``default`` (a name of :data:`LOG_LEVELS`)."""
    ctx = click.get_current_context(silent=True)
    meta = ctx.find_root().meta if ctx is not None else {}
    level = meta.get(_LEVEL_KEY)
    if isinstance(level, str):
        return level
    return "info" if meta.get(_LEVEL_KEY + ".verbose") else default


def group_protocol_option(command: F) -> F:
    """``--group-protocol auto|consumer|classic`` for a stream process."""
    option = _remembered_choice(
        "--group-protocol",
        GROUP_PROTOCOLS,
        _PROTOCOL_KEY,
        "Consumer group protocol (wins over [kafka] group_protocol): classic + range, "
        "KIP-848 (consumer), or auto (KIP-848 where the broker serves it).",
    )
    return option(command)  # type: ignore[no-any-return]


def chosen_group_protocol(configured: str) -> str:
    """``--group-protocol`` when given, else ``configured`` (``[kafka] group_protocol``)."""
    ctx = click.get_current_context(silent=True)
    meta = ctx.find_root().meta if ctx is not None else {}
    chosen = meta.get(_PROTOCOL_KEY)
    return chosen if isinstance(chosen, str) else configured
