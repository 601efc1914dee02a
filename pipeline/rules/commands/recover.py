"""The ``replay_apply`` command: an operator's ``vigil replay --apply``, authorized and audited
before anything is written (DESIGN.md §10 "Authorization failure and checkpoints").

Owns :func:`replay_apply` (operators only): the watcher must be the subject's and active at the
recovered ``version``, and the current grants must let it evaluate its source now (the evaluator's
own rule); the outcome is one audit record in ``definition-log``. Left out: what is recovered and
writing it (``pipeline.rules.recovery``, ``pipeline.ops.replay_apply``)."""

from __future__ import annotations

from typing import Final

from pipeline.rules.commands.context import CommandContext, Refusal, named_watcher
from pipeline.rules.commands.model import CommandOutcome, ResultCode, watcher_view
from pipeline.rules.evaluation import authorization_for
from pipeline.rules.lifecycle import WatcherStatus

__all__ = ["NOTE_MAX", "replay_apply"]

NOTE_MAX: Final = 500


def replay_apply(ctx: CommandContext) -> CommandOutcome:
    """Allow writing what an authorization failure skipped for the named watcher, and log it."""
    command = ctx.command
    entry = named_watcher(ctx)
    if command.version is not None and command.version != entry.version:
        raise Refusal(
            ResultCode.CONFLICT,
            f"version {command.version} is not the watcher's current version {entry.version}",
            "version",
        )
    if entry.status is not WatcherStatus.ACTIVE:
        raise Refusal(
            ResultCode.CONFLICT,
            f"watcher {entry.watcher_id!r} is {entry.status.value}: only an active watcher's "
            "skipped evaluations are recovered",
            "watcher_id",
        )
    grants = (record.grant for record in ctx.grants.values())
    decision = authorization_for(entry.definition(), grants, ctx.now)
    if not decision.allowed:
        raise Refusal(ResultCode.DENIED, f"the current grants still deny it: {decision}")
    summary = (command.text or "").strip()[:NOTE_MAX]
    note = f"replay --apply by {command.principal.name}: {summary or 'no summary'}"
    return ctx.ok({**watcher_view(entry), "applied": True, "note": note},
                  definitions=(entry,), note=note)  # fmt: skip
