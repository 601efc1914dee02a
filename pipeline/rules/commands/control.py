"""The daemon's own verbs ``run``, ``query`` and the agent step of ``prompt`` (DESIGN.md §5).

Owns :func:`authorize_control`: after the role check (agents may do none) and the host's rule
(``host``), the subject's grants must let it ``manage`` source ``control`` (purpose
``control.chat``) for the chat in ``target``, so revoking the daemon's grant locks these verbs. The
command writes only its answer; starting the script or the agent is the daemon's, after it."""

from __future__ import annotations

from pipeline.rules.authz import Action, AuthzDecision, authorize
from pipeline.rules.commands.context import CommandContext, Refusal, check_host
from pipeline.rules.commands.immediate import CONTROL_PURPOSE, CONTROL_SOURCE
from pipeline.rules.commands.model import CommandOutcome, ResultCode

__all__ = ["authorize_control", "check_control"]


def check_control(ctx: CommandContext, chat: str, action: Action) -> AuthzDecision:
    """Fail-closed: a grant lets the subject ``action`` source ``control`` for ``chat`` (the
    daemon's grant does); a refusal otherwise. ``send`` delivers, the daemon's verbs manage."""
    command = ctx.command
    decision = authorize(
        (record.grant for record in ctx.grants.values()),
        tenant_id=command.tenant_id,
        user_id=command.user_id,
        purpose=CONTROL_PURPOSE,
        action=action,
        source_id=CONTROL_SOURCE,
        target=chat,
        now=ctx.now,
    )
    if not decision.allowed:
        raise Refusal(ResultCode.DENIED, decision.detail)
    return decision


def authorize_control(ctx: CommandContext) -> CommandOutcome:
    command = ctx.command
    chat = command.target
    if not chat:
        raise Refusal(ResultCode.INVALID, "name the chat the verb runs for", "target")
    check_host(ctx, command.verb.value, CONTROL_PURPOSE, chat, "verb")
    decision = check_control(ctx, chat, Action.MANAGE)
    return ctx.ok({"verb": command.verb.value, "target": chat, "grant_id": decision.grant_id})
