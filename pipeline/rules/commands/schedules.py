"""The control plane's ``schedule`` and ``schedule_update`` commands (seed 001, DESIGN.md §5, §10).

Owns :func:`schedule`: a schedule watcher ``schedule:<chat>:<name>`` the daemon's grant lets the
subject manage; a live name conflicts unless ``schedule_update``. An agent schedules only ``send``
and ``prompt``, within its session's schedules and limits, a cron one expiring within ``[limits]
agent_cron_ttl``; a ``run`` or ``prompt`` is the host's alone (``host``). Timing, chats and the argv
grammar are ``pipeline.control``'s."""

from __future__ import annotations

import contextlib
from datetime import datetime

from pipeline.rules.authz import Action, Role
from pipeline.rules.commands.context import (
    CommandContext,
    Refusal,
    bound_session,
    check_grant,
    check_host_definition,
    check_room,
    submitted_definition,
)
from pipeline.rules.commands.limits import is_schedule
from pipeline.rules.commands.model import CommandOutcome, CommandVerb, RegistryEntry, ResultCode
from pipeline.rules.commands.versions import accept
from pipeline.rules.definition import DeliveryVerb, WatcherDefinition
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import rfc3339_seconds
from pipeline.rules.lifecycle import WatcherStatus, is_live
from pipeline.rules.sources import ScheduleSource

__all__ = ["schedule"]


def schedule(ctx: CommandContext) -> CommandOutcome:
    """Create (``schedule``) or upsert (``schedule_update``) one schedule watcher."""
    command = ctx.command
    principal = command.principal
    session = bound_session(principal)
    body = command.definition
    if body is not None and body.get("session_id") not in (None, session):
        raise Refusal(ResultCode.INVALID, "a schedule's session is its creator's", "session_id")
    definition = submitted_definition(
        ctx, None if body is None or session is None else {**body, "session_id": session}
    )
    if not is_schedule(definition.watcher_id):
        raise Refusal(ResultCode.INVALID, "a schedule is schedule:<chat>:<name>", "watcher_id")
    if principal.role is Role.AGENT and definition.delivery.verb is DeliveryVerb.RUN:
        raise Refusal(ResultCode.DENIED, "an agent schedules send or prompt, never run", "argv")
    before = ctx.view.get(definition.watcher_id)
    expiry = _agent_cron_expiry(ctx, definition, before)
    if expiry is not None and body is not None:
        definition = submitted_definition(
            ctx, {**body, "session_id": session, "expires_at": rfc3339_seconds(expiry)}
        )
    check_host_definition(ctx, definition)
    check_grant(ctx, definition, Action.MANAGE)
    if before is not None and is_live(before.status):
        if command.verb is not CommandVerb.SCHEDULE_UPDATE:
            raise Refusal(
                ResultCode.CONFLICT,
                f"schedule {definition.watcher_id!r} exists and is {before.status.value}",
                "watcher_id",
            )
        if session is not None and before.session_id != session:
            raise Refusal(
                ResultCode.DENIED,
                "an agent replaces only the schedules its own session created",
                "name",
            )
        return accept(ctx, definition, before.status, before, keep=before)
    check_room(ctx, definition.watcher_id, session_id=session)
    return accept(ctx, definition, WatcherStatus.ACTIVE, before)


def _agent_cron_expiry(
    ctx: CommandContext, definition: WatcherDefinition, before: RegistryEntry | None
) -> datetime | None:
    """When an agent's cron schedule expires (DESIGN.md §10 "Limits"): within
    ``limits.agent_cron_ttl`` of now, and never later than the live schedule it replaces, so a
    chain of upserts cannot keep it alive; a later ``expires_at`` is refused. None for anything
    that is not an agent's cron."""
    source = definition.source
    if ctx.command.principal.role is not Role.AGENT or not isinstance(source, ScheduleSource):
        return None
    if source.cron is None:
        return None
    latest = ctx.now + ctx.limits.agent_cron_ttl
    if before is not None and is_live(before.status):
        with contextlib.suppress(DefinitionError):
            kept = before.definition().expires_at
            if kept is not None:
                latest = min(latest, kept)
    asked = definition.expires_at
    if asked is not None and asked > latest:
        raise Refusal(
            ResultCode.INVALID,
            f"an agent's cron schedule expires by {rfc3339_seconds(latest)}",
            "expires_at",
        )
    return latest if asked is None else asked
