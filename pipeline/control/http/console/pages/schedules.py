"""The console's schedules page: each configured chat's schedules, and cancelling one. Owns
:func:`router`. Left out: what is listed and how a cancel is decided
(``console.schedules``, through the same commands as ``/v1/schedules``).
"""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from pipeline.control.http.auth import ApiError
from pipeline.control.http.console.core import READ_TIMEOUT_S, Console, Refused, guard
from pipeline.control.http.console.schedules import cancel_schedule, chat_schedules
from pipeline.control.http.console.sessions import Session, secure_headers

__all__ = ["router"]


def router(console: Console) -> APIRouter:
    routes = APIRouter(include_in_schema=False)
    services = console.services

    @routes.get("/ui/schedules")
    def schedules(request: Request) -> Response:
        return guard(console, request, partial(_page, console, request))

    @routes.post("/ui/schedules/cancel")
    async def cancel(request: Request) -> Response:
        session: Session | None = None
        try:
            session, form = await console.posted(request)
            await run_in_threadpool(
                cancel_schedule,
                services,
                session.principal,
                form.get("chat", ""),
                form.get("name", ""),
            )
        except Refused as refused:
            return console.refused(None, refused)
        except ApiError as exc:
            return console.refused(session, exc)
        return secure_headers(RedirectResponse("/ui/schedules", status_code=303))

    return routes


def _page(console: Console, request: Request) -> Response:
    session = console.session(request)
    chats, notice = chat_schedules(
        console.services, console.pool, session.principal, READ_TIMEOUT_S
    )
    return console.render("schedules.html", session, chats=chats, notice=notice)
