"""What every command decision shares: its context, its refusals and its checks.

Owns :class:`CommandContext` (the command, the subject's registry view, the grants, ``now``),
:class:`Refusal` (a result code raised by a check and turned into an error result by
``pipeline.rules.commands.apply.apply``), and the checks every verb draws on: role
(:func:`role_verb`: a schedule's create is ``schedule``, which agents may do; another subject's
object is "not found", never "denied"), grants (fail-closed), the expected revision (CAS), the
agent-watch cap, and reading the named watcher or the submitted definition. The verbs themselves are
``pipeline.rules.commands.apply``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from pipeline.rules.authz import Action, Role, Subject, Verb, authorize, may
from pipeline.rules.authz import DenyReason as _Deny
from pipeline.rules.commands.model import (
    Command,
    CommandError,
    CommandOutcome,
    CommandResult,
    CommandVerb,
    GrantRecord,
    RegistryEntry,
    ResultCode,
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
    "check_cap",
    "check_grant",
    "check_revision",
    "check_role",
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
    CommandVerb.KEY: Verb.SEND,  # every role that sends the subject content (agents too)
}
SCHEDULE_PREFIX: Final = "schedule:"
"""Watcher ids of the control plane's schedules: ``schedule:<chat>:<name>`` (DESIGN.md §10)."""
# Verbs on one existing object: someone else's object is "not found", never "denied".
_OBJECT_VERBS: Final = frozenset(
    {
        CommandVerb.UPDATE,
        CommandVerb.APPROVE,
        CommandVerb.PAUSE,
        CommandVerb.RESUME,
        CommandVerb.CANCEL,
        CommandVerb.SHOW,
    }
)
_HIDDEN: Final = frozenset({_Deny.TENANT_MISMATCH, _Deny.USER_MISMATCH, _Deny.SESSION_MISMATCH})


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


def role_verb(command: Command) -> Verb:
    """The role verb a command needs (DESIGN.md §10: agents schedule and propose). Creating or
    updating a schedule watcher is ``schedule``, not ``create``, so an agent's schedule carries
    the agent as its principal; the definition's own rules then hold that id to a schedule
    source. An immediate prompt's answer (a ``send`` with ``answer_to``) needs ``prompt``."""
    verb = command.verb
    if verb in (CommandVerb.CREATE, CommandVerb.UPDATE):
        named = command.watcher_id
        if named is None and command.definition is not None:
            named = command.definition.get("watcher_id")
        if isinstance(named, str) and named.startswith(SCHEDULE_PREFIX):
            return Verb.SCHEDULE
    if verb is CommandVerb.SEND and command.answer_to is not None:
        return Verb.PROMPT
    return _ROLE_VERB[verb]


def check_role(ctx: CommandContext) -> None:
    """The principal's role allows the verb on the subject (grants are checked separately)."""
    command = ctx.command
    decision = may(command.principal, role_verb(command), ctx.subject)
    if decision.allowed:
        return
    if command.verb in _OBJECT_VERBS and decision.reason in _HIDDEN:
        raise Refusal(ResultCode.NOT_FOUND, f"no watcher {command.watcher_id!r}", "watcher_id")
    raise Refusal(ResultCode.DENIED, decision.detail)


def check_grant(ctx: CommandContext, definition: WatcherDefinition, action: Action) -> None:
    """Fail-closed: one grant of the subject must cover purpose, source, tool, target, action."""
    source = definition.source
    decision = authorize(
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
    if not decision.allowed:
        raise Refusal(ResultCode.DENIED, decision.detail)


def check_revision(ctx: CommandContext, entry: RegistryEntry) -> None:
    expected = ctx.command.expected_revision
    if expected is not None and expected != entry.revision:
        raise Refusal(
            ResultCode.STALE_REVISION,
            f"watcher {entry.watcher_id!r} is at revision {entry.revision}, not {expected}",
            "expected_revision",
        )


def check_cap(ctx: CommandContext, entry: RegistryEntry) -> None:
    """At most :data:`AGENT_CAP` active agent watches per (tenant, user, session)."""
    if entry.session_id is None:
        return
    active = sum(
        1
        for other in ctx.view.values()
        if other.watcher_id != entry.watcher_id
        and other.session_id == entry.session_id
        and other.status is WatcherStatus.ACTIVE
    )
    if active >= AGENT_CAP:
        raise Refusal(
            ResultCode.CAP_REACHED,
            f"session {entry.session_id!r} already has {active} active watches",
            "session_id",
        )


def named_watcher(ctx: CommandContext) -> RegistryEntry:
    watcher_id = ctx.command.watcher_id
    if watcher_id is None:
        raise Refusal(ResultCode.INVALID, "name the watcher", "watcher_id")
    entry = ctx.view.get(watcher_id)
    if entry is None:
        raise Refusal(ResultCode.NOT_FOUND, f"no watcher {watcher_id!r}", "watcher_id")
    principal = ctx.command.principal
    if (
        principal.role in (Role.AGENT, Role.SCOPED_CHAT)
        and principal.session_id != entry.session_id
    ):
        raise Refusal(ResultCode.NOT_FOUND, f"no watcher {watcher_id!r}", "watcher_id")
    return entry


def submitted_definition(ctx: CommandContext) -> WatcherDefinition:
    body = ctx.command.definition
    if body is None:
        raise Refusal(ResultCode.INVALID, "a definition is required", "definition")
    if "version" in body:
        raise Refusal(ResultCode.INVALID, "the version is assigned on acceptance", "version")
    definition = WatcherDefinition.from_json(
        body, tenant_id=ctx.command.tenant_id, user_id=ctx.command.user_id
    )
    named = ctx.command.watcher_id
    if named is not None and named != definition.watcher_id:
        raise Refusal(ResultCode.INVALID, "does not match the definition", "watcher_id")
    return definition


def not_agent(definition: WatcherDefinition) -> None:
    if definition.session_id is not None:
        raise Refusal(ResultCode.INVALID, "an agent watch is proposed, then approved", "session_id")
