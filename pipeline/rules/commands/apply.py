"""What one control-plane command does: the pure decision (DESIGN.md §2, §3, §10).

Owns :func:`apply` (one command against one subject's registry view, every grant, ``now`` and
the :class:`~pipeline.rules.commands.limits.Limits`; refusals are results), the verb dispatch,
expiring stale proposals and the subject-wide verbs (erase, key). One writer per subject
partition applies commands in order, so every check is atomic without locks. Leaves out each
verb's rules (``watchers``, ``grants``, ``send``, ``schedules``, ``control``) and Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Final

from pipeline.rules.authz import Action
from pipeline.rules.budgets import NO_CEILINGS, BudgetCeilings
from pipeline.rules.commands.context import CommandContext, Refusal, check_role, check_subject_grant
from pipeline.rules.commands.control import authorize_control
from pipeline.rules.commands.grants import grant_add, grant_list, grant_revoke
from pipeline.rules.commands.host import NO_HOST, Host
from pipeline.rules.commands.limits import DEFAULT_LIMITS, Limits, stale_proposals
from pipeline.rules.commands.model import (
    Command,
    CommandError,
    CommandOutcome,
    CommandResult,
    CommandVerb,
    GrantRecord,
    LifecycleChange,
    RegistryEntry,
    ResultCode,
    Shred,
)
from pipeline.rules.commands.recover import replay_apply
from pipeline.rules.commands.redeliver import redeliver
from pipeline.rules.commands.schedules import schedule
from pipeline.rules.commands.send import send
from pipeline.rules.commands.transfer import export_page, import_watcher
from pipeline.rules.commands.versions import forget
from pipeline.rules.commands.watchers import (
    approve,
    cancel,
    close,
    create,
    list_watchers,
    pause,
    propose,
    resume,
    show,
    update,
)
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import utc

__all__ = ["apply", "refused"]


def apply(
    command: Command,
    registry_view: Mapping[str, RegistryEntry],
    grants: Mapping[str, GrantRecord],
    now: datetime,
    limits: Limits = DEFAULT_LIMITS,
    *,
    ceilings: BudgetCeilings = NO_CEILINGS,
    host: Host = NO_HOST,
) -> CommandOutcome:
    """Decide ``command`` for its subject: ``registry_view`` is that subject's watchers by id,
    ``grants`` every grant by id, ``ceilings`` the operator's budget ceilings, ``host`` the
    daemon's subject and chats (the only ones that may run and prompt). Never raises for a
    bad command: refusals are results.

    Proposals older than ``limits.proposal_ttl`` are gone before the command is decided (not
    approvable, counted or listed), and whatever the command decides, its outcome forgets them.
    """
    now = utc(now)
    stale = stale_proposals(registry_view, now, limits.proposal_ttl)
    view = registry_view
    if stale:
        gone = {entry.watcher_id for entry in stale}
        view = {key: entry for key, entry in registry_view.items() if key not in gone}
    ctx = CommandContext(command, view, grants, now, limits, ceilings, host=host)
    try:
        check_role(ctx)
        return _forgetting(stale, _HANDLERS[command.verb](ctx))
    except Refusal as refusal:
        error = refusal.error
    except DefinitionError as exc:
        error = CommandError(code=ResultCode.INVALID, message=exc.message, field=exc.field)
    refusal_outcome = CommandOutcome(
        result=CommandResult(
            request_id=command.request_id,
            verb=command.verb.value,
            ok=False,
            error=error,
            processed_at=ctx.now,
        )
    )
    return _forgetting(stale, refusal_outcome)


def _forgetting(stale: tuple[RegistryEntry, ...], outcome: CommandOutcome) -> CommandOutcome:
    """``outcome`` preceded by the tombstones of the expired proposals ``stale``."""
    if not stale:
        return outcome
    registry, watchers, lifecycle = forget(stale)
    return replace(
        outcome,
        registry=registry + outcome.registry,
        watchers=watchers + outcome.watchers,
        lifecycle=lifecycle + outcome.lifecycle,
    )


def refused(request_id: str, verb: str, error: DefinitionError, now: datetime) -> CommandResult:
    """The ``invalid`` result of a command record that did not parse (the consumer's edge)."""
    return CommandResult(
        request_id=request_id,
        verb=verb,
        ok=False,
        error=CommandError(code=ResultCode.INVALID, message=error.message, field=error.field),
        processed_at=utc(now),
    )


def _erase(ctx: CommandContext) -> CommandOutcome:
    """Forget a subject: every data key shredded (what they sealed, in every topic, reads as
    erased from now on), tombstones for every watcher and grant, and one subject-wide lifecycle
    record from which the evaluator, delivery and the budget store erase their own state.
    Rechecked like any management command: a grant of the subject must name ``manage``."""
    check_subject_grant(ctx, Action.MANAGE)
    entries = sorted(ctx.view.values(), key=lambda e: e.watcher_id)
    registry, watchers, lifecycle = forget(entries)
    tenant, user = ctx.command.tenant_id, ctx.command.user_id
    grants = sorted(
        grant_id
        for grant_id, record in ctx.grants.items()
        if record.grant.tenant_id == tenant and record.grant.user_id == user
    )
    return ctx.ok(
        {
            "tenant_id": tenant,
            "user_id": user,
            "erased": len(entries),
            "watcher_ids": [e.watcher_id for e in entries],
            "grants_revoked": len(grants),
        },
        grants=tuple((grant_id, None) for grant_id in grants),
        shred=(Shred(None),),
        registry=registry,
        watchers=watchers,
        lifecycle=(*lifecycle, LifecycleChange(None, "erased")),
    )


def _key(ctx: CommandContext) -> CommandOutcome:
    """Nothing to decide: the processor makes the subject's data key if it has none, so the
    caller can seal the command it sends next (DESIGN.md §10)."""
    return ctx.ok({"tenant_id": ctx.command.tenant_id, "user_id": ctx.command.user_id})


_HANDLERS: Final[dict[CommandVerb, Callable[[CommandContext], CommandOutcome]]] = {
    CommandVerb.CREATE: create,
    CommandVerb.UPDATE: update,
    CommandVerb.PROPOSE: propose,
    CommandVerb.APPROVE: approve,
    CommandVerb.PAUSE: pause,
    CommandVerb.RESUME: resume,
    CommandVerb.CANCEL: cancel,
    CommandVerb.CLOSE: close,
    CommandVerb.ERASE: _erase,
    CommandVerb.SHOW: show,
    CommandVerb.LIST: list_watchers,
    CommandVerb.GRANT_ADD: grant_add,
    CommandVerb.GRANT_REVOKE: grant_revoke,
    CommandVerb.GRANT_LIST: grant_list,
    CommandVerb.SEND: send,
    CommandVerb.SCHEDULE: schedule,
    CommandVerb.SCHEDULE_UPDATE: schedule,
    CommandVerb.RUN: authorize_control,
    CommandVerb.QUERY: authorize_control,
    CommandVerb.PROMPT: authorize_control,
    CommandVerb.KEY: _key,
    CommandVerb.REDELIVER: redeliver,
    CommandVerb.REPLAY_APPLY: replay_apply,
    CommandVerb.EXPORT: export_page,
    CommandVerb.IMPORT: import_watcher,
}
