"""The verbs on one watcher: create, update, propose, approve, pause, resume, cancel, close,
show and list, each deciding against the subject's registry view (DESIGN.md §3, §10).

Owns the handlers :func:`pipeline.rules.commands.apply.apply` dispatches these verbs to, and the
management recheck they share (a grant must let the subject manage the watcher, seed 000).
Leaves out the dispatch and the subject-wide verbs (``apply``) and what a change writes
(``versions``).
"""

from __future__ import annotations

from dataclasses import replace

from pipeline.rules.agent_watch import check_agent_watch, proposal_body
from pipeline.rules.authz import Action, Role, Verb, may
from pipeline.rules.commands.context import (
    CommandContext,
    Refusal,
    bound_session,
    check_cap,
    check_grant,
    check_host_definition,
    check_revision,
    check_room,
    check_subject_grant,
    covered,
    named_watcher,
    not_agent,
    submitted_definition,
)
from pipeline.rules.commands.limits import is_schedule
from pipeline.rules.commands.model import (
    CommandOutcome,
    RegistryEntry,
    ResultCode,
    Shred,
    fingerprint,
    watcher_view,
)
from pipeline.rules.commands.versions import accept, move
from pipeline.rules.errors import DefinitionError
from pipeline.rules.lifecycle import (
    CloseReason,
    LifecycleEvent,
    WatcherStatus,
    close_event,
    is_live,
)
from pipeline.rules.pinned import check_registered_states

__all__ = [
    "approve",
    "cancel",
    "close",
    "create",
    "list_watchers",
    "pause",
    "propose",
    "resume",
    "show",
    "update",
]


def create(ctx: CommandContext) -> CommandOutcome:
    definition = submitted_definition(ctx)
    not_agent(definition)
    check_host_definition(ctx, definition)
    check_grant(ctx, definition, Action.MANAGE)
    before = _replaceable(ctx, definition.watcher_id)
    check_room(ctx, definition.watcher_id)
    return accept(ctx, definition, WatcherStatus.ACTIVE, before)


def update(ctx: CommandContext) -> CommandOutcome:
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


def propose(ctx: CommandContext) -> CommandOutcome:
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
    before = _replaceable(ctx, definition.watcher_id)
    check_room(ctx, definition.watcher_id, proposal=True, session_id=definition.session_id)
    return accept(ctx, definition, WatcherStatus.PROPOSED, before)


def _replaceable(ctx: CommandContext, watcher_id: str) -> RegistryEntry | None:
    """What a new watcher of ``watcher_id`` follows: nothing, or a closed one (its next
    version); a live one is a conflict."""
    before = ctx.view.get(watcher_id)
    if before is not None and is_live(before.status):
        raise Refusal(
            ResultCode.CONFLICT,
            f"watcher {watcher_id!r} exists and is {before.status.value}",
            "watcher_id",
        )
    return before


def _manage(ctx: CommandContext, entry: RegistryEntry) -> None:
    """Seed 000: a management verb rechecks that a grant lets the subject manage the watcher."""
    try:
        definition = entry.definition()
    except DefinitionError:
        raise Refusal(ResultCode.DENIED, "the stored definition no longer validates") from None
    check_grant(ctx, definition, Action.MANAGE)


def approve(ctx: CommandContext) -> CommandOutcome:
    entry = named_watcher(ctx)
    check_revision(ctx, entry)
    definition = entry.definition()
    check_grant(ctx, definition, Action.APPROVE)
    if entry.status is WatcherStatus.PROPOSED:
        check_registered_states(definition)  # a proposal made before a value was refused
        check_cap(ctx, entry)
    return move(ctx, entry, LifecycleEvent.APPROVE)


def pause(ctx: CommandContext) -> CommandOutcome:
    # A revoked grant refuses pause too (seed 000); it also stops every evaluation and delivery
    # of the watcher (fail-closed), so refusing locks nothing on.
    entry = named_watcher(ctx)
    _manage(ctx, entry)
    check_revision(ctx, entry)
    return move(ctx, entry, LifecycleEvent.PAUSE)


def resume(ctx: CommandContext) -> CommandOutcome:
    entry = named_watcher(ctx)
    _manage(ctx, entry)
    check_revision(ctx, entry)
    if entry.status is WatcherStatus.PAUSED:
        check_cap(ctx, entry)
    return move(ctx, entry, LifecycleEvent.RESUME)


def cancel(ctx: CommandContext) -> CommandOutcome:
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


def close(ctx: CommandContext) -> CommandOutcome:
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


def show(ctx: CommandContext) -> CommandOutcome:
    entry = named_watcher(ctx)
    _manage(ctx, entry)
    return ctx.ok(watcher_view(entry))


def list_watchers(ctx: CommandContext) -> CommandOutcome:
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
