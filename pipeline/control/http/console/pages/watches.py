"""The console's watches list: the subject's watchers, filtered and paginated by the command
processor, each with its next look and — for a role that may read receipts — its last outcome,
read once the list answered from the listed rows' partitions only (one read). Owns
:func:`router`. Left out: a single watcher's page (``watch``).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Final

from fastapi import APIRouter, Request
from fastapi.responses import Response

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.common import guarded
from pipeline.control.http.console.core import (
    Console,
    filter_query,
    guard,
    may_see,
    page_count,
    page_number,
    query_param,
)
from pipeline.control.schedules import next_look
from pipeline.rules.authz import Verb

__all__ = ["router"]

_STATES: Final = ("active", "proposed", "paused", "closed")


def router(console: Console) -> APIRouter:
    routes = APIRouter(include_in_schema=False)

    @routes.get("/ui/watches")
    def watches(request: Request) -> Response:
        return guard(console, request, partial(_page, console, request))

    return routes


def _page(console: Console, request: Request) -> Response:
    services = console.services
    session = console.session(request)
    who = session.principal
    state = query_param(request, "state", _STATES)
    source = query_param(request, "source")
    chat = query_param(request, "session")
    notice = None
    number = page_number(request)
    try:
        shown, total = console.page_of(who, number, state=state, session_id=chat, source_id=source)
    except ApiError as exc:
        if exc.code is not ApiCode.DENIED:
            raise
        shown, total = [], 0
        notice = exc.message  # no grant to manage anything: nothing to list
    # Each row's last outcome is its newest receipt: read once the command processor listed
    # the rows (authorized: no read before), from their sources' partitions only, and only by
    # a role that may read receipts at all.
    sources = {str(row.get("source_id", "")) for row in shown}
    last: dict[str, dict[str, Any]] = {}
    if shown and may_see(who, Verb.EVALUATIONS):
        read = services.ledger.latest
        last = guarded(partial(read, who.tenant_id, who.user_id, sorted(sources)))
    now = services.clock.now()
    for row in shown:
        live = row.get("status") == "active"
        row["next_look"] = next_look(row.get("definition") or {}, now) if live else None
        row["last"] = last.get(row.get("watcher_id", ""))
    pages = page_count(total)
    filters = {"state": state, "source": source, "session": chat}
    return console.render(
        "watches.html",
        session,
        notice=notice,
        watchers=shown,
        total=total,
        page=min(number, pages),
        pages=pages,
        filters=filters,
        states=_STATES,
        query=filter_query(filters),
    )
