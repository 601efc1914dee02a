"""The immediate ``send`` command: a delivery now, decided by the command processor (DESIGN.md §2).

Owns :func:`send` (``send``, or ``prompt`` for a prompt's answer): the daemon's grant must cover the
chat, and the outcome carries the outbox entry (``immediate``) written in the transaction that
answers the command. Running a prompt's agent happens at the edge, before and outside any
transaction; delivering is the delivery consumer's."""

from __future__ import annotations

from typing import Final

from pipeline.rules.authz import Action
from pipeline.rules.commands.context import CommandContext, Refusal
from pipeline.rules.commands.control import check_control
from pipeline.rules.commands.immediate import answer_entry, immediate_entry
from pipeline.rules.commands.model import CommandOutcome, ResultCode

__all__ = ["SEND_TEXT_MAX", "send"]

SEND_TEXT_MAX: Final = 65_536
"""The longest text a ``send`` command carries (the edges bound it tighter: one chat message)."""


def send(ctx: CommandContext) -> CommandOutcome:
    """An immediate ``send`` (or an immediate prompt's answer): authorized like any delivery
    (purpose ``control.chat``, source ``control``, action deliver, the chat as target) and
    written to ``outbox`` in the transaction that answers it. The key is the request's
    delivery key, or for an answer the one derived from its prompt's, so a retry dedupes."""
    command = ctx.command
    chat, text = command.target, command.text
    if not chat:
        raise Refusal(ResultCode.INVALID, "name the chat to deliver to", "target")
    if not text:
        raise Refusal(ResultCode.INVALID, "a send needs text", "text")
    if len(text) > SEND_TEXT_MAX:
        raise Refusal(ResultCode.INVALID, f"at most {SEND_TEXT_MAX} characters", "text")
    check_control(ctx, chat, Action.DELIVER)
    # A prompt's answer is the ``send`` of the prompt's request, keyed from the prompt's key.
    answer_to = command.answer_to
    entry = immediate_entry(
        tenant_id=command.tenant_id,
        user_id=command.user_id,
        verb="send" if answer_to is None else "prompt",
        request_id=answer_to or command.request_id,
        chat=chat,
        now=ctx.now,
        text=text if answer_to is None else None,
    )
    if answer_to is not None:
        entry = answer_entry(entry, text, ctx.now)
    return ctx.ok(
        {
            "delivery_key": entry.delivery_key,
            "target": chat,
            "request_id": entry.trigger["request_id"],
        },
        outbox=(entry,),
    )
