"""What the console's schedules page shows and does: each chat's schedules with their next and last
fire, and cancelling one (DESIGN.md §9; seed 001).

Listing and cancelling go through the dispatch core exactly as the ``/v1/schedules`` routes do (same
role check and commands); last fires are each chat's newest receipts, read only for a role that may
read receipts. Left out: routes, sessions and CSRF (``pages.schedules``, ``core``), words
(``render``)."""

from __future__ import annotations

import re
from concurrent.futures import Executor
from functools import partial
from typing import Any, Final

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.common import ApiServices, guarded
from pipeline.control.http.watches import schedule_verb
from pipeline.control.schedules import last_fire, schedule_id
from pipeline.control.verbs import NAME_PATTERN
from pipeline.rules.authz import Principal, Subject, Verb, may
from pipeline.rules.commands.immediate import schedule_source

__all__ = ["cancel_schedule", "chat_schedules"]

_NAME: Final = re.compile(NAME_PATTERN)


def chat_schedules(
    services: ApiServices, pool: Executor, who: Principal, timeout_s: float
) -> tuple[list[dict[str, Any]], str | None]:
    """Per configured chat ``{chat, schedules}`` (each schedule as ``list --json`` shows it,
    with ``last``: its last fire or None), and a notice when ``who`` may list none."""
    tenant, user = who.tenant_id, who.user_id
    receipts = may(who, Verb.EVALUATIONS, Subject(tenant, user)).allowed  # before any read
    shown: list[dict[str, Any]] = []
    for chat in services.chats:
        reading = None
        if receipts:
            reading = pool.submit(services.ledger.latest, tenant, user, [schedule_source(chat)])
        try:
            listed = schedule_verb(services, who, {"verb": "list", "chat": chat})
        except ApiError as exc:
            if reading is not None:
                reading.cancel()
            if exc.code is not ApiCode.DENIED:
                raise
            return [], exc.message
        fires: dict[str, dict[str, Any]] = (
            {} if reading is None else guarded(partial(reading.result, timeout_s))
        )
        rows = [
            {**entry, "last": last_fire(fires.get(schedule_id(chat, entry["name"])))}
            for entry in listed.get("schedules", [])
        ]
        shown.append({"chat": chat, "schedules": rows})
    return shown, None


def cancel_schedule(services: ApiServices, who: Principal, chat: str, name: str) -> None:
    """Cancel ``name`` in ``chat`` for ``who`` (an unknown chat or name: not found)."""
    if chat not in services.chats or not _NAME.fullmatch(name):
        raise ApiError(ApiCode.NOT_FOUND, "no such schedule", "name")
    schedule_verb(services, who, {"verb": "cancel", "name": name, "chat": chat})
