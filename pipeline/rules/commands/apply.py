"""What one control-plane command does: the pure decision (DESIGN.md §2, §3, §10).

Owns :func:`apply`, which decides one command against one subject's registry view, every grant,
``now`` and the :class:`~pipeline.rules.commands.limits.Limits`: role checks and grant checks
(fail-closed for every management, erasure and control verb — seed 000; another subject's object
is "not found"), create refusing a live id (a closed id becomes the next version), CAS on
revisions (an update must name the revision it read), the limits on what a subject holds live,
the cap of three active agent watches per (tenant, user, session), proposals held to seed 003's
bounds and collapsed onto an identical live one, proposals forgotten once their time to be
approved has passed, lifecycle moves, the evaluator's ``close``, erasure, the immediate ``send``
whose outbox entry the processor writes (DESIGN.md §2), the control plane's schedules and the
daemon's own verbs. One writer per subject partition applies commands in order, so every check
is atomic without locks. The models are ``model``; the checks every verb shares ``context``;
what a change writes ``versions``; the grant verbs ``grants``; the immediate ``send`` ``send``;
schedules ``schedules``; the daemon's verbs ``control``; the limits ``limits``.

Left out: Kafka (``consumers.commands`` writes a :class:`CommandOutcome` in one transaction)
and how callers authenticate (``pipeline.control``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Final

from pipeline.rules.agent_watch import check_agent_watch, proposal_body
from pipeline.rules.authz import Action, Role, Verb, may
from pipeline.rules.budgets import NO_CEILINGS, BudgetCeilings
from pipeline.rules.commands.context import (
    CommandContext,
    Refusal,
    bound_session,
    check_cap,
    check_grant,
    check_host_definition,
    check_revision,
    check_role,
    check_room,
    check_subject_grant,
    covered,
    named_watcher,
    not_agent,
    submitted_definition,
)
from pipeline.rules.commands.control import authorize_control
from pipeline.rules.commands.grants import grant_add, grant_list, grant_revoke
from pipeline.rules.commands.host import NO_HOST, Host
from pipeline.rules.commands.limits import DEFAULT_LIMITS, Limits, is_schedule, stale_proposals
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
    fingerprint,
    watcher_view,
)
from pipeline.rules.commands.recover import replay_apply
from pipeline.rules.commands.redeliver import redeliver
from pipeline.rules.commands.schedules import schedule
from pipeline.rules.commands.send import send
from pipeline.rules.commands.transfer import export_page, import_watcher
from pipeline.rules.commands.versions import accept, forget, move
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import utc
from pipeline.rules.lifecycle import (
    CloseReason,
    LifecycleEvent,
    WatcherStatus,
    close_event,
    is_live,
)
from pipeline.rules.pinned import check_registered_states

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


# --- watcher verbs --------------------------------------------------------------------------


def _create(ctx: CommandContext) -> CommandOutcome:
    definition = submitted_definition(ctx)
    not_agent(definition)
    check_host_definition(ctx, definition)
    check_grant(ctx, definition, Action.MANAGE)
    before = ctx.view.get(definition.watcher_id)
    if before is not None and is_live(before.status):
        raise Refusal(
            ResultCode.CONFLICT,
            f"watcher {definition.watcher_id!r} exists and is {before.status.value}",
            "watcher_id",
        )
    check_room(ctx, definition.watcher_id)
    return accept(ctx, definition, WatcherStatus.ACTIVE, before)


def _update(ctx: CommandContext) -> CommandOutcome:
    """A new version of a live watcher: compare-and-set on the revision the caller read, which
    it must name (seed 000: a stale writer is refused; a schedule's ``--update`` is
    ``schedule_update``, not this)."""
    definition = submitted_definition(ctx)
    not_agent(definition)
    check_host_definition(ctx, definition)
    before = ctx.view.get(definition.watcher_id)
    if before is None:
        raise Refusal(ResultCode.NOT_FOUND, f"no watcher {definition.watcher_id!r}", "watcher_id")
    _manage(ctx, before)
    check_grant(ctx, definition, Action.MANAGE)
    check_revision(ctx, before, required=True)
    if not is_live(before.status):
        raise Refusal(
            ResultCode.CONFLICT,
            f"watcher {definition.watcher_id!r} is {before.status.value}: create it again",
            "watcher_id",
        )
    return accept(ctx, definition, before.status, before, keep=before)


def _propose(ctx: CommandContext) -> CommandOutcome:
    """A proposal: always an agent watch within seed 003's bounds, whatever the body omits; an
    identical live one collapses onto the existing id; a new one must fit the limits."""
    command = ctx.command
    principal = command.principal
    if command.definition is None:
        raise Refusal(ResultCode.INVALID, "a definition is required", "definition")
    body = proposal_body(
        command.definition, request_id=command.request_id, session_id=bound_session(principal)
    )
    definition = submitted_definition(ctx, body)
    check_agent_watch(definition)
    check_host_definition(ctx, definition)
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
    check_room(ctx, definition.watcher_id, proposal=True, session_id=definition.session_id)
    return accept(ctx, definition, WatcherStatus.PROPOSED, before)


def _manage(ctx: CommandContext, entry: RegistryEntry) -> None:
    """Seed 000: a management verb rechecks that a grant lets the subject manage the watcher."""
    try:
        definition = entry.definition()
    except DefinitionError:
        raise Refusal(ResultCode.DENIED, "the stored definition no longer validates") from None
    check_grant(ctx, definition, Action.MANAGE)


def _approve(ctx: CommandContext) -> CommandOutcome:
    entry = named_watcher(ctx)
    check_revision(ctx, entry)
    definition = entry.definition()
    check_grant(ctx, definition, Action.APPROVE)
    if entry.status is WatcherStatus.PROPOSED:
        check_registered_states(definition)  # a proposal made before a value was refused
        check_cap(ctx, entry)
    return move(ctx, entry, LifecycleEvent.APPROVE)


def _pause(ctx: CommandContext) -> CommandOutcome:
    # A revoked grant refuses pause too (seed 000); it also stops every evaluation and delivery
    # of the watcher (fail-closed), so refusing locks nothing on.
    entry = named_watcher(ctx)
    _manage(ctx, entry)
    check_revision(ctx, entry)
    return move(ctx, entry, LifecycleEvent.PAUSE)


def _resume(ctx: CommandContext) -> CommandOutcome:
    entry = named_watcher(ctx)
    _manage(ctx, entry)
    check_revision(ctx, entry)
    if entry.status is WatcherStatus.PAUSED:
        check_cap(ctx, entry)
    return move(ctx, entry, LifecycleEvent.RESUME)


def _cancel(ctx: CommandContext) -> CommandOutcome:
    """Owners and managers cancel anything of theirs; an agent only the schedules its session
    created (DESIGN.md §10). Cancel is terminal and purges evidence: the watcher's evidence keys
    are shredded, so its receipts and tick payloads read as erased; the subject's other watchers
    keep theirs."""
    entry = named_watcher(ctx)
    if ctx.command.principal.role is Role.AGENT and not is_schedule(entry.watcher_id):
        raise Refusal(
            ResultCode.DENIED, "an agent cancels only the schedules it created", "watcher_id"
        )
    _manage(ctx, entry)
    check_revision(ctx, entry)
    moved = move(ctx, entry, LifecycleEvent.CANCEL, reason=CloseReason.CANCELLED)
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
    return move(ctx, entry, close_event(reason), reason=reason)


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


def _show(ctx: CommandContext) -> CommandOutcome:
    entry = named_watcher(ctx)
    _manage(ctx, entry)
    return ctx.ok(watcher_view(entry))


def _list(ctx: CommandContext) -> CommandOutcome:
    """Live watchers by default (closed ones stop showing, §10); ``state``, ``session_id`` and
    ``source_id`` filter exactly; ``offset``/``limit`` return one page (by id) and the total.
    Only watchers a grant lets the subject manage are listed (none at all: ``denied``); an agent
    sees only the schedules its session created, a scoped chat only its session's watches."""
    command = ctx.command
    principal = command.principal
    check_subject_grant(ctx, Action.MANAGE)
    session = command.session_id
    bound = principal.role in (Role.AGENT, Role.SCOPED_CHAT)
    if bound:
        session = principal.session_id

    source = command.source_id

    def wanted(entry: RegistryEntry) -> bool:
        if command.state is not None:
            if entry.status is not command.state:
                return False
        elif not is_live(entry.status):
            return False
        if principal.role is Role.AGENT and not is_schedule(entry.watcher_id):
            return False
        if session is not None and entry.session_id != session:
            return False
        if source is not None and entry.source_id != source:
            return False
        return covered(ctx, entry, Action.MANAGE)

    entries = sorted((e for e in ctx.view.values() if wanted(e)), key=lambda e: e.watcher_id)
    if command.limit is None and command.offset is None:
        return ctx.ok({"watchers": [watcher_view(e) for e in entries]})
    start = command.offset or 0
    end = len(entries) if command.limit is None else start + command.limit
    page = entries[start:end]
    return ctx.ok({"watchers": [watcher_view(e) for e in page], "total": len(entries)})


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
