"""The console's proposals page: the subject's pending proposals in plain words, each with the
room its agent session has left under seed 003's cap. Agents and scoped chats see no such page
(a 404; the command processor refuses their approvals anyway). Owns :func:`router`. Left out:
approving and rejecting (``watch``).
"""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from fastapi.responses import Response

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.console.core import (
    NO_PROPOSALS,
    Console,
    guard,
    page_count,
    page_number,
)
from pipeline.control.http.console.render import proposal_words
from pipeline.rules.commands.context import AGENT_CAP

__all__ = ["router"]


def router(console: Console) -> APIRouter:
    routes = APIRouter(include_in_schema=False)

    @routes.get("/ui/proposals")
    def proposals(request: Request) -> Response:
        return guard(console, request, partial(_page, console, request))

    return routes


def _page(console: Console, request: Request) -> Response:
    session = console.session(request)
    who = session.principal
    if who.role in NO_PROPOSALS:
        raise ApiError(ApiCode.NOT_FOUND, "no such page")
    number = page_number(request)
    proposed, total = console.page_of(who, number, state="proposed")
    used: dict[str, int] = {}
    for sid in {v["session_id"] for v in proposed if v.get("session_id")}:
        _, used[sid] = console.page_of(who, 1, state="active", session_id=sid, size=0)
    rows = [
        {
            "watch": view,
            "words": proposal_words(view["definition"]),
            "cap_left": max(0, AGENT_CAP - used.get(view.get("session_id") or "", 0)),
        }
        for view in proposed
    ]
    pages = page_count(total)
    return console.render(
        "proposals.html",
        session,
        proposals=rows,
        total=total,
        page=min(number, pages),
        pages=pages,
    )
