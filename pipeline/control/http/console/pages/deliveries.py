"""The console's deliveries page, and redelivering one from it: the subject's deliveries from
the ledger index (filtered by state and watcher, paginated here), after the role and grant
checks the API makes; a redelivery is the API's (read, 404 across subjects, check, command).
Owns :func:`router`. Left out: the index (``services.ledger``).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Final
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.common import ApiServices, guarded, run_command
from pipeline.control.http.console.core import (
    Console,
    Refused,
    filter_query,
    guard,
    page_number,
    paged,
    query_param,
)
from pipeline.control.http.console.sessions import Session, secure_headers
from pipeline.control.http.deliveries import granted, may_read, read_one
from pipeline.rules.authz import Principal
from pipeline.rules.commands.model import CommandVerb

__all__ = ["router"]

_STATES: Final = ("pending", "dispatching", "delivered", "dead", "suppressed", "cancelled")


def router(console: Console) -> APIRouter:
    routes = APIRouter(include_in_schema=False)
    services = console.services

    @routes.get("/ui/deliveries")
    def deliveries(request: Request) -> Response:
        return guard(console, request, partial(_page, console, request))

    @routes.post("/ui/deliveries/{delivery_key}/redeliver")
    async def redeliver(request: Request, delivery_key: str) -> Response:
        session: Session | None = None
        try:
            session, _ = await console.posted(request)
            who = session.principal
            found = await run_in_threadpool(_redeliver, services, who, delivery_key)
        except Refused as refused:
            return console.refused(None, refused)
        except ApiError as exc:
            return console.refused(session, exc)
        target = f"/ui/deliveries?{urlencode({'watcher': found['watcher_id']})}"
        return secure_headers(RedirectResponse(target, status_code=303))

    return routes


def _page(console: Console, request: Request) -> Response:
    services = console.services
    session = console.session(request)
    who = session.principal
    tenant, user = who.tenant_id, who.user_id
    may_read(who, tenant, user)
    granted(services, who, tenant, user)
    state = query_param(request, "state", _STATES)
    watcher_id = query_param(request, "watcher")
    rows = guarded(lambda: services.ledger.deliveries(tenant, user, state, watcher_id))
    shown, pages = paged(rows, page_number(request))
    filters = {"state": state, "watcher": watcher_id}
    return console.render(
        "deliveries.html",
        session,
        deliveries=shown,
        total=len(rows),
        page=min(page_number(request), pages),
        pages=pages,
        filters=filters,
        states=_STATES,
        query=filter_query(filters),
    )


def _redeliver(services: ApiServices, who: Principal, key: str) -> dict[str, Any]:
    """The API's redeliver, for the console: read (404 across subjects), check, command."""
    tenant, user = who.tenant_id, who.user_id
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        raise ApiError(ApiCode.NOT_FOUND, f"no delivery {key[:64]}", "delivery_key")
    found: dict[str, Any] = read_one(services, who, tenant, user, key)
    if not found["redeliverable"]:
        raise ApiError(ApiCode.CONFLICT, f"delivery is {found['state']}: nothing to redeliver")
    run_command(
        services,
        CommandVerb.REDELIVER,
        who,
        tenant,
        user,
        delivery_key=key,
        watcher_id=found["watcher_id"],
    )
    return found
