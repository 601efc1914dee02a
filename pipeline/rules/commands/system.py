"""Commands vigil's own processes issue, as the system principal: the evaluator's ``close``.

Only the command processor writes ``registry``, ``watchers`` and ``lifecycle``; when the
evaluator closes a watch (satisfied, terminal, expired, authority revoked) it emits a ``close``
command in the transaction that marks its own state closed (DESIGN §10 "Who changes a
watcher's lifecycle").
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from pipeline.rules.authz import Principal, Role
from pipeline.rules.commands.model import Command, CommandVerb
from pipeline.rules.lifecycle import CloseReason

__all__ = ["SYSTEM_PRINCIPAL", "close_command"]

SYSTEM_PRINCIPAL: Final = Principal(
    name="vigil-evaluator", role=Role.SYSTEM, tenant_id="-", user_id="-"
)


def close_command(
    parts: tuple[str, str, str], version: int, reason: CloseReason, trigger_key: str, now: datetime
) -> Command:
    """The ``close`` command of watcher ``parts`` at ``version``. The request id derives from
    the closing evidence, so a replayed close is the same request."""
    tenant_id, user_id, watcher_id = parts
    return Command(
        request_id=f"close:{trigger_key[:48]}",
        verb=CommandVerb.CLOSE,
        principal=SYSTEM_PRINCIPAL,
        tenant_id=tenant_id,
        user_id=user_id,
        issued_at=now,
        watcher_id=watcher_id,
        version=version,
        reason=reason,
    )
