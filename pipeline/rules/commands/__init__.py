"""Command decisions: what one control-plane command does to the registry, pure.

:func:`apply` takes a command, the subject's registry view, every grant and ``now`` and returns
every record the command processor writes in one transaction (:class:`CommandOutcome`). The
models are ``model``; the checks every verb shares ``context``; what a change writes
``versions``; the limits on what a subject holds ``limits``; the grant verbs ``grants``; the
immediate ``send`` ``send`` with its outbox entries in ``immediate``; the control plane's
schedules ``schedules``; the daemon's own verbs ``control``; ``redeliver`` ``redeliver``; the
commands vigil's own processes issue (the evaluator's ``close``) ``system``. This module says
what is public.
"""

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
