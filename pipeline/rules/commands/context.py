"""What every command decision shares: its context, its refusals and its checks.

Owns :class:`CommandContext` (command, registry view, grants, ``now``, limits), :class:`Refusal` (a
result code a check raises; ``apply`` turns it into an error result) and the shared checks: role
(:func:`role_verb`; another subject's object is "not found"), grants (fail-closed), the host's
verbs, the expected revision, room in the limits and seed 003's :data:`AGENT_CAP`. The verbs
themselves are ``pipeline.rules.commands.apply``'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pipeline.rules.authz import Action, Principal, Role, Subject, Verb, authorize, may
from pipeline.rules.authz import DenyReason as _Deny
from pipeline.rules.budgets import NO_CEILINGS, BudgetCeilings
from pipeline.rules.commands.host import NO_HOST, Host, host_verdict, refusal_text
from pipeline.rules.commands.limits import (
    DEFAULT_LIMITS,
    SCHEDULE_PREFIX,
    Limits,
    Room,
    is_schedule,
)
from pipeline.rules.commands.model import (
    Command,
    CommandError,
    CommandOutcome,
    CommandResult,
    CommandVerb,
    GrantRecord,
    GrantScope,
    RegistryEntry,
    ResultCode,
    grant_scope,
)
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import VigilError
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.sources import PollingSource

__all__ = [
    "AGENT_CAP",
    "SCHEDULE_PREFIX",
    "CommandContext",
    "Refusal",
    "bound_session",
    "check_cap",
    "check_grant",
    "check_host",
    "check_host_definition",
    "check_revision",
    "check_role",
    "check_room",
    "check_subject_grant",
    "covered",
    "named_watcher",
    "not_agent",
    "role_verb",
    "submitted_definition",
]

AGENT_CAP: Final = 3
"""Active agent watches per (tenant, user, session): seed 003's bound."""

_ROLE_VERB: Final[dict[CommandVerb, Verb]] = {
    CommandVerb.CREATE: Verb.CREATE,
    CommandVerb.UPDATE: Verb.CREATE,
    CommandVerb.PROPOSE: Verb.PROPOSE,
    CommandVerb.APPROVE: Verb.APPROVE,
    CommandVerb.PAUSE: Verb.PAUSE,
    CommandVerb.RESUME: Verb.RESUME,
    CommandVerb.CANCEL: Verb.CANCEL,
    CommandVerb.CLOSE: Verb.CLOSE,
    CommandVerb.ERASE: Verb.ERASE,
    CommandVerb.SHOW: Verb.SHOW,
    CommandVerb.LIST: Verb.LIST,
    CommandVerb.GRANT_ADD: Verb.GRANT,
    CommandVerb.GRANT_REVOKE: Verb.GRANT,
    CommandVerb.GRANT_LIST: Verb.GRANT,
    CommandVerb.SEND: Verb.SEND,
    CommandVerb.SCHEDULE: Verb.SCHEDULE,
    CommandVerb.SCHEDULE_UPDATE: Verb.SCHEDULE,
    CommandVerb.RUN: Verb.RUN,
    CommandVerb.QUERY: Verb.QUERY,
    CommandVerb.PROMPT: Verb.PROMPT,
    CommandVerb.KEY: Verb.SEND,  # every role that sends the subject content (agents too)
    CommandVerb.REDELIVER: Verb.REDELIVER,
    CommandVerb.REPLAY_APPLY: Verb.REPLAY,
    CommandVerb.EXPORT: Verb.TRANSFER,
    CommandVerb.IMPORT: Verb.TRANSFER,
}
# Verbs on one existing object: someone else's object is "not found", never "denied".
_OBJECT_VERBS: Final = frozenset(
    {
        CommandVerb.UPDATE,
        CommandVerb.APPROVE,
        CommandVerb.PAUSE,
        CommandVerb.RESUME,
        CommandVerb.CANCEL,
        CommandVerb.SHOW,
        CommandVerb.REDELIVER,
    }
)
_HIDDEN: Final = frozenset({_Deny.TENANT_MISMATCH, _Deny.USER_MISMATCH, _Deny.SESSION_MISMATCH})
_SESSION_BOUND: Final = frozenset({Role.AGENT, Role.SCOPED_CHAT})


class Refusal(VigilError):
    """A command refused with a result code; caught in :func:`apply`, never escapes."""

    def __init__(self, code: ResultCode, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.error = CommandError(code=code, message=message, field=field)


@dataclass(slots=True)
class CommandContext:
    """One command being decided: for its subject's registry view, every grant, at ``now``."""

    command: Command
    view: Mapping[str, RegistryEntry]
    grants: Mapping[str, GrantRecord]
    now: datetime
    limits: Limits = DEFAULT_LIMITS
    ceilings: BudgetCeilings = NO_CEILINGS  # the operator's [budgets.ceilings]
    host: Host = NO_HOST  # the daemon's subject and chats: who may run and prompt
    # Grant verdicts already reached in this command, by scope: a subject's watchers share few.
    verdicts: dict[tuple[str, str, GrantScope, Action], bool] = field(default_factory=dict)

    @property
    def subject(self) -> Subject:
        return Subject(self.command.tenant_id, self.command.user_id)

    def ok(self, result: dict[str, Any], **effects: Any) -> CommandOutcome:
        return CommandOutcome(
            result=CommandResult(
                request_id=self.command.request_id,
                verb=self.command.verb.value,
                ok=True,
                result=result,
                processed_at=self.now,
            ),
            **effects,
        )


# --- checks ---------------------------------------------------------------------------------


def bound_session(principal: Principal) -> str | None:
    """The session a session-bound principal (agent, scoped chat) acts in; None for the rest."""
    return principal.session_id if principal.role in _SESSION_BOUND else None


def role_verb(command: Command) -> Verb:
    """The role verb a command needs (DESIGN.md §10). ``create`` and ``update`` are ``create``
    whatever the id, so an agent never makes an active or ``schedule:*`` watcher that way; the
    control plane's ``schedule`` commands are ``schedule``. An immediate prompt's answer (a
    ``send`` with ``answer_to``) needs ``prompt``."""
    if command.verb is CommandVerb.SEND and command.answer_to is not None:
        return Verb.PROMPT
    return _ROLE_VERB[command.verb]


def check_role(ctx: CommandContext) -> None:
    """The principal's role allows the verb on the subject (grants are checked separately)."""
    command = ctx.command
    decision = may(command.principal, role_verb(command), ctx.subject)
    if decision.allowed:
        return
    if command.verb is CommandVerb.REDELIVER and decision.reason in _HIDDEN:
        raise Refusal(ResultCode.NOT_FOUND, f"no delivery {command.delivery_key!r}", "delivery_key")
    if command.verb in _OBJECT_VERBS and decision.reason in _HIDDEN:
        raise Refusal(ResultCode.NOT_FOUND, f"no watcher {command.watcher_id!r}", "watcher_id")
    raise Refusal(ResultCode.DENIED, decision.detail)


def _decide(ctx: CommandContext, definition: WatcherDefinition, action: Action) -> Any:
    source = definition.source
    return authorize(
        (record.grant for record in ctx.grants.values()),
        tenant_id=definition.tenant_id,
        user_id=definition.user_id,
        purpose=definition.purpose,
        action=action,
        source_id=definition.source_id,
        tool=source.governed_tool if isinstance(source, PollingSource) else None,
        target=definition.delivery.target,
        now=ctx.now,
    )


def check_grant(ctx: CommandContext, definition: WatcherDefinition, action: Action) -> None:
    """Fail-closed: one grant of the subject must cover purpose, source, tool, target, action."""
    decision = _decide(ctx, definition, action)
    if not decision.allowed:
        raise Refusal(ResultCode.DENIED, decision.detail)


def check_host(
    ctx: CommandContext, verb: str, purpose: str, target: str, field: str = "delivery.verb"
) -> None:
    """A ``run`` or ``prompt`` (``query``) is the host's alone (``pipeline.rules.commands.host``):
    its subject, the control purpose, one of its chats; ``send`` and ``notify`` pass."""
    command = ctx.command
    verdict = host_verdict(
        ctx.host,
        verb,
        tenant_id=command.tenant_id,
        user_id=command.user_id,
        purpose=purpose,
        target=target,
    )
    if not verdict.allowed:
        raise Refusal(ResultCode.DENIED, refusal_text(verdict, verb), field)


def check_host_definition(ctx: CommandContext, definition: WatcherDefinition) -> None:
    """:func:`check_host` for the verb a watcher definition delivers with."""
    delivery = definition.delivery
    check_host(ctx, delivery.verb.value, definition.purpose, delivery.target)


def covered(ctx: CommandContext, entry: RegistryEntry, action: Action) -> bool:
    """Whether a grant covers ``action`` on a stored watcher; one whose stored definition no
    longer parses is covered by nothing (fail-closed)."""
    scope = grant_scope(entry.definition_json)
    if scope is None:
        return False
    memo = (entry.tenant_id, entry.user_id, scope, action)
    known = ctx.verdicts.get(memo)
    if known is not None:
        return known
    decision = authorize(
        (record.grant for record in ctx.grants.values()),
        tenant_id=entry.tenant_id,
        user_id=entry.user_id,
        purpose=scope.purpose,
        action=action,
        source_id=scope.source_id,
        tool=scope.tool,
        target=scope.target,
        now=ctx.now,
    )
    ctx.verdicts[memo] = decision.allowed
    return decision.allowed


def check_subject_grant(ctx: CommandContext, action: Action) -> None:
    """Fail-closed for verbs about a whole subject (``list``, ``erase``): some unexpired grant
    of the subject must name ``action``."""
    command = ctx.command
    for record in ctx.grants.values():
        grant = record.grant
        if (
            (grant.tenant_id, grant.user_id) == (command.tenant_id, command.user_id)
            and action in grant.actions
            and ctx.now < grant.until
        ):
            return
    raise Refusal(
        ResultCode.DENIED,
        f"no grant lets tenant {command.tenant_id!r} user {command.user_id!r} "
        f"{action.value} (seed 000: fail-closed)",
    )


def check_revision(ctx: CommandContext, entry: RegistryEntry, *, required: bool = False) -> None:
    """Compare-and-set: the revision the caller read must be the entry's. An update must name
    one (``required``); lifecycle moves may leave it out."""
    expected = ctx.command.expected_revision
    if expected is None:
        if required:
            raise Refusal(
                ResultCode.STALE_REVISION,
                f"an update names the revision it read (watcher {entry.watcher_id!r} is at "
                f"{entry.revision}): If-Match, expected_revision or --revision",
                "expected_revision",
            )
        return
    if expected != entry.revision:
        raise Refusal(
            ResultCode.STALE_REVISION,
            f"watcher {entry.watcher_id!r} is at revision {entry.revision}, not {expected}",
            "expected_revision",
        )


def check_cap(ctx: CommandContext, entry: RegistryEntry) -> None:
    """At most :data:`AGENT_CAP` active agent watches per (tenant, user, session); the session's
    schedules are counted by :func:`check_room`, not here."""
    if entry.session_id is None or is_schedule(entry.watcher_id):
        return
    active = sum(
        1
        for other in ctx.view.values()
        if other.watcher_id != entry.watcher_id
        and other.session_id == entry.session_id
        and other.status is WatcherStatus.ACTIVE
        and not is_schedule(other.watcher_id)
    )
    if active >= AGENT_CAP:
        raise Refusal(
            ResultCode.CAP_REACHED,
            f"session {entry.session_id!r} already has {active} active watches",
            "session_id",
        )


def check_room(
    ctx: CommandContext, watcher_id: str, *, proposal: bool = False, session_id: str | None = None
) -> None:
    """A new live watcher fits the subject's limits (and a schedule or a proposal its
    session's)."""
    limits = ctx.limits
    room = Room.count(ctx.view.values(), leaving_out=watcher_id, session_id=session_id)
    if is_schedule(watcher_id):
        if room.schedules >= limits.schedules:
            raise _cap(f"the subject already has {room.schedules} live schedules", "watcher_id")
        if session_id is not None and room.session_schedules >= limits.session_schedules:
            raise _cap(
                f"session {session_id!r} already has {room.session_schedules} live schedules",
                "session_id",
            )
        return
    if proposal and room.proposals >= limits.proposals:
        raise _cap(f"the subject already has {room.proposals} pending proposals", "watcher_id")
    if proposal and session_id is not None and room.session_proposals >= limits.session_proposals:
        raise _cap(
            f"session {session_id!r} already has {room.session_proposals} pending proposals",
            "session_id",
        )
    if room.watchers >= limits.watchers:
        raise _cap(f"the subject already has {room.watchers} live watchers", "watcher_id")


def _cap(message: str, field: str) -> Refusal:
    return Refusal(ResultCode.CAP_REACHED, message, field)


def named_watcher(ctx: CommandContext) -> RegistryEntry:
    """The watcher the command names; a session-bound caller reaches only its session's."""
    watcher_id = ctx.command.watcher_id
    if watcher_id is None:
        raise Refusal(ResultCode.INVALID, "name the watcher", "watcher_id")
    entry = ctx.view.get(watcher_id)
    if entry is None:
        raise Refusal(ResultCode.NOT_FOUND, f"no watcher {watcher_id!r}", "watcher_id")
    principal = ctx.command.principal
    if principal.role in _SESSION_BOUND and principal.session_id != entry.session_id:
        raise Refusal(ResultCode.NOT_FOUND, f"no watcher {watcher_id!r}", "watcher_id")
    return entry


def submitted_definition(
    ctx: CommandContext, body: Mapping[str, Any] | None = None
) -> WatcherDefinition:
    """The command's definition (or ``body``, a filled-in copy of it), for its subject."""
    body = ctx.command.definition if body is None else body
    if body is None:
        raise Refusal(ResultCode.INVALID, "a definition is required", "definition")
    if "version" in body:
        raise Refusal(ResultCode.INVALID, "the version is assigned on acceptance", "version")
    definition = WatcherDefinition.from_json(
        body, tenant_id=ctx.command.tenant_id, user_id=ctx.command.user_id
    )
    if definition.budgets is not None:
        ctx.ceilings.check(definition.budgets)
    named = ctx.command.watcher_id
    if named is not None and named != definition.watcher_id:
        raise Refusal(ResultCode.INVALID, "does not match the definition", "watcher_id")
    return definition


def not_agent(definition: WatcherDefinition) -> None:
    if definition.session_id is not None:
        raise Refusal(ResultCode.INVALID, "an agent watch is proposed, then approved", "session_id")
