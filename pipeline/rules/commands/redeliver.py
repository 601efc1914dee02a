"""The ``redeliver`` command: a dead-lettered or suppressed delivery sent again (DESIGN.md §9).

Owns :func:`redeliver` (owners, managers, operators): authorization is rechecked fail-closed against
what the watcher delivers, or any unexpired ``deliver`` grant once it is gone; the outcome is one
``Redelivery`` record. Left out: the key's state, budgets and grant at dispatch (delivery rechecks
them) and the fresh attempt count (``pipeline.rules.dispatch.redeliver``)."""

from __future__ import annotations

from pipeline.rules.authz import Action
from pipeline.rules.commands.context import (
    CommandContext,
    Refusal,
    check_grant,
    check_subject_grant,
)
from pipeline.rules.commands.model import CommandOutcome, Redelivery, ResultCode
from pipeline.rules.errors import DefinitionError

__all__ = ["redeliver"]


def redeliver(ctx: CommandContext) -> CommandOutcome:
    """Ask delivery to send ``delivery_key`` again; ``watcher_id`` (optional) names the
    watcher the delivery belongs to, for the exact grant check."""
    command = ctx.command
    key = command.delivery_key
    if key is None:
        raise Refusal(ResultCode.INVALID, "name the delivery key", "delivery_key")
    entry = None if command.watcher_id is None else ctx.view.get(command.watcher_id)
    if entry is None:
        check_subject_grant(ctx, Action.DELIVER)
    else:
        try:
            definition = entry.definition()
        except DefinitionError:
            raise Refusal(ResultCode.DENIED, "the stored definition no longer validates") from None
        check_grant(ctx, definition, Action.DELIVER)
    request = Redelivery(
        delivery_key=key,
        tenant_id=command.tenant_id,
        user_id=command.user_id,
        request_id=command.request_id,
        requested_at=ctx.now,
    )
    return ctx.ok(
        {
            "delivery_key": key,
            "tenant_id": command.tenant_id,
            "user_id": command.user_id,
            "requested": True,
        },
        redeliveries=(request,),
    )
