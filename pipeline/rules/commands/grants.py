"""The grant verbs of the command processor: add, revoke (by id, or by subject and source) and
list (DESIGN.md §3, §10).

Owns the three handlers :func:`pipeline.rules.commands.apply.apply` dispatches ``grant_add``,
``grant_revoke`` and ``grant_list`` to. The role check (operators manage grants) runs before
them in ``apply``; matching grants against a request is ``pipeline.rules.authz``.
"""

from __future__ import annotations

from pipeline.rules.authz import Grant
from pipeline.rules.commands.context import CommandContext, Refusal
from pipeline.rules.commands.model import (
    CommandOutcome,
    GrantRecord,
    ResultCode,
    grant_id_for,
    grant_view,
)

__all__ = ["grant_add", "grant_list", "grant_revoke"]


def grant_add(ctx: CommandContext) -> CommandOutcome:
    """A grant for the command's own subject, valid until a future instant; its id derives from
    the request, so a retried add is the same grant."""
    spec = ctx.command.grant
    if spec is None:
        raise Refusal(ResultCode.INVALID, "a grant is required", "grant")
    if (spec.tenant_id, spec.user_id) != (ctx.command.tenant_id, ctx.command.user_id):
        raise Refusal(ResultCode.INVALID, "the grant's subject is the command's", "grant")
    if spec.until <= ctx.now:
        raise Refusal(ResultCode.INVALID, "must be in the future", "until")
    grant_id = grant_id_for(ctx.command.request_id)
    grant = Grant(
        grant_id=grant_id,
        tenant_id=spec.tenant_id,
        user_id=spec.user_id,
        purpose=spec.purpose,
        sources=frozenset(spec.sources),
        tools=frozenset(spec.tools),
        targets=frozenset(spec.targets),
        actions=frozenset(spec.actions),
        until=spec.until,
    )
    record = GrantRecord(grant, ctx.now, ctx.command.principal.name)
    return ctx.ok(grant_view(record), grants=((grant_id, record),))


def grant_revoke(ctx: CommandContext) -> CommandOutcome:
    """By id (a tombstone), or every grant of the subject that names ``source_id``: a grant
    naming only that source is removed, one naming more loses that source."""
    command = ctx.command
    writes: list[tuple[str, GrantRecord | None]] = []
    if command.grant_id is not None:
        if command.grant_id not in ctx.grants:
            raise Refusal(ResultCode.NOT_FOUND, f"no grant {command.grant_id!r}", "grant_id")
        writes.append((command.grant_id, None))
    elif command.source_id is not None:
        for grant_id, record in sorted(ctx.grants.items()):
            grant = record.grant
            if (grant.tenant_id, grant.user_id) != (command.tenant_id, command.user_id):
                continue
            if command.source_id not in grant.sources:
                continue
            rest = grant.sources - {command.source_id}
            narrowed = GrantRecord(
                grant.model_copy(update={"sources": rest}), record.created_at, record.created_by
            )
            writes.append((grant_id, narrowed if rest else None))
        if not writes:
            raise Refusal(
                ResultCode.NOT_FOUND, f"no grant names source {command.source_id!r}", "source_id"
            )
    else:
        raise Refusal(ResultCode.INVALID, "name a grant id, or a subject and a source", "grant_id")
    return ctx.ok(
        {
            "revoked": [gid for gid, rec in writes if rec is None],
            "narrowed": [gid for gid, rec in writes if rec is not None],
        },
        grants=tuple(writes),
    )


def grant_list(ctx: CommandContext) -> CommandOutcome:
    """Every grant, by id (the role check keeps this to operators)."""
    records = sorted(ctx.grants.values(), key=lambda r: r.grant.grant_id)
    return ctx.ok({"grants": [grant_view(r) for r in records]})
