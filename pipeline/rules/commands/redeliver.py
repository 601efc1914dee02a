"""The ``redeliver`` command: a dead-lettered or suppressed delivery sent again (DESIGN.md §9).

Owns :func:`redeliver`, which :func:`pipeline.rules.commands.apply.apply` dispatches the verb to
after the role check (owners, managers, operators; never agents or scoped chats; another
tenant's or user's delivery is "not found"). Authorization is rechecked fail-closed: when the
delivery's watcher is still in the subject's registry, a grant must let the subject ``deliver``
exactly what that watcher delivers (purpose, source, tool, target); otherwise (an immediate
``send``, a watcher already forgotten) some unexpired grant of the subject must name
``deliver``. The outcome is one :class:`~pipeline.rules.commands.model.Redelivery` record.

Left out: whether the key is dead-lettered or suppressed (only delivery holds its state: it
applies the request to such a key and ignores it otherwise), the budgets and the exact grant of
the entry at dispatch (delivery rechecks both, as for any attempt), and the fresh attempt count
under the same key (``pipeline.rules.dispatch.redeliver``).
"""

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
