"""What one control-plane command does: the pure decision (DESIGN.md §2, §3, §10).

Owns :func:`apply`, which decides one command against one subject's registry view, every grant
and ``now``: role checks and grant checks (fail-closed; another subject's object is "not
found"), create refusing a live id (a closed id becomes the next version), CAS on revisions,
the cap of three active agent watches per (tenant, user, session), collapse of identical live
proposals onto the existing id, lifecycle moves, the evaluator's ``close``, erasure, and the
immediate ``send`` whose outbox entry the processor writes (DESIGN.md §2). One writer per
subject partition applies commands in order, so every check is atomic without locks. The
models are ``pipeline.rules.commands.model``; the context and checks every verb
shares are ``pipeline.rules.commands.context``; the grant verbs are
``pipeline.rules.commands.grants``, the immediate ``send`` ``pipeline.rules.commands.send``.

Left out: Kafka (``consumers.commands`` writes a :class:`CommandOutcome` in one transaction)
and how callers authenticate (``pipeline.control``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Final

from pipeline.rules.authz import Action, Role, Verb, may
from pipeline.rules.commands.context import (
    CommandContext,
    Refusal,
    check_cap,
    check_grant,
    check_revision,
    check_role,
    named_watcher,
    not_agent,
    submitted_definition,
)
from pipeline.rules.commands.grants import grant_add, grant_list, grant_revoke
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
    WatcherWrite,
    fingerprint,
    watcher_view,
)
from pipeline.rules.commands.send import send
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError, TransitionError
from pipeline.rules.instants import utc
from pipeline.rules.keys import canonical_json
from pipeline.rules.lifecycle import (
    CloseReason,
    LifecycleEvent,
    WatcherStatus,
    close_event,
    is_live,
    transition,
)

__all__ = ["apply", "refused"]


def apply(
    command: Command,
    registry_view: Mapping[str, RegistryEntry],
    grants: Mapping[str, GrantRecord],
    now: datetime,
) -> CommandOutcome:
    """Decide ``command`` for its subject: ``registry_view`` is that subject's watchers by id,
    ``grants`` every grant by id. Never raises for a bad command: refusals are results."""
    ctx = CommandContext(command, registry_view, grants, utc(now))
    try:
        check_role(ctx)
        return _HANDLERS[command.verb](ctx)
    except Refusal as refusal:
        error = refusal.error
    except DefinitionError as exc:
        error = CommandError(code=ResultCode.INVALID, message=exc.message, field=exc.field)
    return CommandOutcome(
        result=CommandResult(
            request_id=command.request_id,
            verb=command.verb.value,
            ok=False,
            error=error,
            processed_at=ctx.now,
        )
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


# --- views ----------------------------------------------------------------------------------


def _accept(
    ctx: CommandContext,
    definition: WatcherDefinition,
    status: WatcherStatus,
    before: RegistryEntry | None,
    *,
    keep: RegistryEntry | None = None,
) -> CommandOutcome:
    """A new definition version: registry, watchers (moving partitions), lifecycle, log."""
    version = 1 if before is None else before.version + 1
    accepted = definition.with_version(version)
    entry = RegistryEntry(
        tenant_id=accepted.tenant_id,
        user_id=accepted.user_id,
        watcher_id=accepted.watcher_id,
        version=version,
        revision=1 if before is None else before.revision + 1,
        status=status,
        source_id=accepted.source_id,
        session_id=accepted.session_id,
        fingerprint=fingerprint(accepted),
        created_at=ctx.now if keep is None else keep.created_at,
        updated_at=ctx.now,
        definition_json=canonical_json(accepted.to_json()).decode("utf-8"),
        activated_at=(ctx.now if status is WatcherStatus.ACTIVE else None)
        if keep is None
        else keep.activated_at,
    )
    writes = [WatcherWrite(entry.watcher_id, entry.source_id, entry)]
    if before is not None and before.source_id != entry.source_id:
        writes.insert(0, WatcherWrite(before.watcher_id, before.source_id, None))
    return ctx.ok(
        watcher_view(entry),
        registry=((entry.watcher_id, entry),),
        watchers=tuple(writes),
        lifecycle=(_lifecycle(entry),),
        definitions=(entry,),
    )


def _lifecycle(entry: RegistryEntry) -> LifecycleChange:
    return LifecycleChange(
        entry.watcher_id, entry.status.value, entry.version, entry.revision, entry.closed_reason
    )


def _create(ctx: CommandContext) -> CommandOutcome:
    definition = submitted_definition(ctx)
    not_agent(definition)
    check_grant(ctx, definition, Action.MANAGE)
    before = ctx.view.get(definition.watcher_id)
    if before is not None and is_live(before.status):
        raise Refusal(
            ResultCode.CONFLICT,
            f"watcher {definition.watcher_id!r} exists and is {before.status.value}",
            "watcher_id",
        )
    return _accept(ctx, definition, WatcherStatus.ACTIVE, before)


def _update(ctx: CommandContext) -> CommandOutcome:
    """CAS on the expected revision; without one (a schedule's ``--update``) an upsert."""
    definition = submitted_definition(ctx)
    not_agent(definition)
    check_grant(ctx, definition, Action.MANAGE)
    before = ctx.view.get(definition.watcher_id)
    live = before is not None and is_live(before.status)
    if ctx.command.expected_revision is None and not live:
        return _accept(ctx, definition, WatcherStatus.ACTIVE, before)
    if before is None:
        raise Refusal(ResultCode.NOT_FOUND, f"no watcher {definition.watcher_id!r}", "watcher_id")
    check_revision(ctx, before)
    if not live:
        raise Refusal(
            ResultCode.CONFLICT,
            f"watcher {definition.watcher_id!r} is {before.status.value}: create it again",
            "watcher_id",
        )
    return _accept(ctx, definition, before.status, before, keep=before)


def _propose(ctx: CommandContext) -> CommandOutcome:
    """An agent's (or user's) proposal; an identical live one collapses onto the existing id."""
    definition = submitted_definition(ctx)
    principal = ctx.command.principal
    decision = may(principal, Verb.PROPOSE, ctx.subject, session_id=definition.session_id)
    if not decision.allowed:
        raise Refusal(ResultCode.DENIED, decision.detail, "session_id")
    check_grant(ctx, definition, Action.PROPOSE)
    same = fingerprint(definition)
    for other in sorted(ctx.view.values(), key=lambda e: e.watcher_id):
        if other.fingerprint == same and is_live(other.status):
            return ctx.ok({**watcher_view(other), "collapsed": True})
    before = ctx.view.get(definition.watcher_id)
    if before is not None and is_live(before.status):
        raise Refusal(
            ResultCode.CONFLICT,
            f"watcher {definition.watcher_id!r} exists and is {before.status.value}",
            "watcher_id",
        )
    return _accept(ctx, definition, WatcherStatus.PROPOSED, before)


def _move(
    ctx: CommandContext,
    entry: RegistryEntry,
    event: LifecycleEvent,
    *,
    reason: CloseReason | None = None,
) -> CommandOutcome:
    try:
        status = transition(entry.status, event)
    except TransitionError as exc:
        raise Refusal(ResultCode.CONFLICT, str(exc), "watcher_id") from None
    moved = replace(
        entry,
        status=status,
        revision=entry.revision + 1,
        updated_at=ctx.now,
        activated_at=ctx.now if event is LifecycleEvent.APPROVE else entry.activated_at,
        closed_reason=reason if not is_live(status) else None,
    )
    return ctx.ok(
        watcher_view(moved),
        registry=((moved.watcher_id, moved),),
        watchers=(WatcherWrite(moved.watcher_id, moved.source_id, moved),),
        lifecycle=(_lifecycle(moved),),
    )


def _approve(ctx: CommandContext) -> CommandOutcome:
    entry = named_watcher(ctx)
    check_revision(ctx, entry)
    check_grant(ctx, entry.definition(), Action.APPROVE)
    if entry.status is WatcherStatus.PROPOSED:
        check_cap(ctx, entry)
    return _move(ctx, entry, LifecycleEvent.APPROVE)


def _pause(ctx: CommandContext) -> CommandOutcome:
    # Stopping work needs ownership only: a revoked grant must never lock a watcher on.
    entry = named_watcher(ctx)
    check_revision(ctx, entry)
    return _move(ctx, entry, LifecycleEvent.PAUSE)


def _resume(ctx: CommandContext) -> CommandOutcome:
    entry = named_watcher(ctx)
    check_revision(ctx, entry)
    check_grant(ctx, entry.definition(), Action.MANAGE)
    if entry.status is WatcherStatus.PAUSED:
        check_cap(ctx, entry)
    return _move(ctx, entry, LifecycleEvent.RESUME)


def _cancel(ctx: CommandContext) -> CommandOutcome:
    """Cancel is terminal and purges evidence: the watcher's evidence keys are shredded, so its
    receipts and tick payloads read as erased; the subject's other watchers keep theirs."""
    entry = named_watcher(ctx)
    check_revision(ctx, entry)
    moved = _move(ctx, entry, LifecycleEvent.CANCEL, reason=CloseReason.CANCELLED)
    return replace(moved, shred=(Shred(entry.watcher_id),))


def _close(ctx: CommandContext) -> CommandOutcome:
    """The evaluator closed a watch; a close of another version, or a second one, is a no-op."""
    reason = ctx.command.reason
    if reason is None or reason is CloseReason.CANCELLED:
        raise Refusal(
            ResultCode.INVALID,
            "close needs satisfied, terminal_unsatisfied, expired or access_revoked",
            "reason",
        )
    entry = named_watcher(ctx)
    version = ctx.command.version
    if (version is not None and version != entry.version) or not is_live(entry.status):
        return ctx.ok({**watcher_view(entry), "applied": False})
    return _move(ctx, entry, close_event(reason), reason=reason)


def _erase(ctx: CommandContext) -> CommandOutcome:
    """Forget a subject: every data key shredded (what they sealed, in every topic, reads as
    erased from now on), tombstones for every watcher and grant, and one subject-wide lifecycle
    record from which the evaluator, delivery and the budget store erase their own state."""
    entries = sorted(ctx.view.values(), key=lambda e: e.watcher_id)
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
        registry=tuple((e.watcher_id, None) for e in entries),
        watchers=tuple(WatcherWrite(e.watcher_id, e.source_id, None) for e in entries),
        lifecycle=(
            *(LifecycleChange(e.watcher_id, e.status.value, tombstone=True) for e in entries),
            LifecycleChange(None, "erased"),
        ),
    )


def _key(ctx: CommandContext) -> CommandOutcome:
    """Nothing to decide: the processor makes the subject's data key if it has none, so the
    caller can seal the command it sends next (DESIGN.md §10)."""
    return ctx.ok({"tenant_id": ctx.command.tenant_id, "user_id": ctx.command.user_id})


def _show(ctx: CommandContext) -> CommandOutcome:
    return ctx.ok(watcher_view(named_watcher(ctx)))


def _list(ctx: CommandContext) -> CommandOutcome:
    """Live watchers by default (closed ones stop showing, §10); ``state`` filters exactly."""
    command = ctx.command
    principal = command.principal
    session = command.session_id
    if principal.role in (Role.AGENT, Role.SCOPED_CHAT):
        session = principal.session_id

    def wanted(entry: RegistryEntry) -> bool:
        if command.state is not None:
            if entry.status is not command.state:
                return False
        elif not is_live(entry.status):
            return False
        return session is None or entry.session_id == session

    entries = sorted((e for e in ctx.view.values() if wanted(e)), key=lambda e: e.watcher_id)
    return ctx.ok({"watchers": [watcher_view(e) for e in entries]})


_HANDLERS: Final[dict[CommandVerb, Callable[[CommandContext], CommandOutcome]]] = {
    CommandVerb.CREATE: _create,
    CommandVerb.UPDATE: _update,
    CommandVerb.PROPOSE: _propose,
    CommandVerb.APPROVE: _approve,
    CommandVerb.PAUSE: _pause,
    CommandVerb.RESUME: _resume,
    CommandVerb.CANCEL: _cancel,
    CommandVerb.CLOSE: _close,
    CommandVerb.ERASE: _erase,
    CommandVerb.SHOW: _show,
    CommandVerb.LIST: _list,
    CommandVerb.GRANT_ADD: grant_add,
    CommandVerb.GRANT_REVOKE: grant_revoke,
    CommandVerb.GRANT_LIST: grant_list,
    CommandVerb.SEND: send,
    CommandVerb.KEY: _key,
}
