"""Command decisions: what one control-plane command does to the registry, pure.

:func:`apply` takes a command, the subject's registry view, every grant and ``now`` and returns
every record the command processor writes in one transaction (:class:`CommandOutcome`). Each verb
family has its own module (``model``, ``context``, ``versions``, ``limits``, ``grants``, ``send``,
``immediate``, ``schedules``, ``control``, ``redeliver``, ``system``); this module says what is
public."""

from pipeline.rules.commands.apply import apply, refused
from pipeline.rules.commands.context import AGENT_CAP
from pipeline.rules.commands.limits import DEFAULT_LIMITS, Limits
from pipeline.rules.commands.model import (
    Command,
    CommandError,
    CommandOutcome,
    CommandResult,
    CommandVerb,
    GrantRecord,
    GrantSpec,
    LifecycleChange,
    Redelivery,
    RegistryEntry,
    ResultCode,
    Shred,
    WatcherWrite,
    fingerprint,
    grant_id_for,
    grant_view,
    watcher_view,
)
from pipeline.rules.commands.send import SEND_TEXT_MAX

__all__ = [
    "AGENT_CAP",
    "DEFAULT_LIMITS",
    "SEND_TEXT_MAX",
    "Command",
    "CommandError",
    "CommandOutcome",
    "CommandResult",
    "CommandVerb",
    "GrantRecord",
    "GrantSpec",
    "LifecycleChange",
    "Limits",
    "Redelivery",
    "RegistryEntry",
    "ResultCode",
    "Shred",
    "WatcherWrite",
    "apply",
    "fingerprint",
    "grant_id_for",
    "grant_view",
    "refused",
    "watcher_view",
]
