"""The console's page of one watcher, and approving or rejecting a proposal from it: the
``show`` answer, its lifecycle records, deliveries and receipts. The reads run beside the
``show`` round trip and are shown only once it answered, by a role that may make them (checked
before any starts); receipts start early when the watcher's source is known from an earlier page
(``console.sources``, a hint the answer checks). Owns :func:`router`. Left out: the list.
"""

from __future__ import annotations

from concurrent.futures import Future
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.common import guarded, run_command
from pipeline.control.http.console.core import (
    PAGE_SIZE,
    READ_TIMEOUT_S,
    Console,
    Refused,
    guard,
    may_see,
)
from pipeline.control.http.console.render import proposal_words
from pipeline.control.http.console.sessions import Session, secure_headers
from pipeline.rules.authz import Principal, Verb
from pipeline.rules.commands.model import CommandVerb

__all__ = ["router"]


def router(console: Console) -> APIRouter:
    routes = APIRouter(include_in_schema=False)

    @routes.get("/ui/watches/{watcher_id}")
    def watch(request: Request, watcher_id: str) -> Response:
        return guard(console, request, partial(_page, console, request, watcher_id))

    @routes.post("/ui/watches/{watcher_id}/approve")
    async def approve(request: Request, watcher_id: str) -> Response:
        return await _lifecycle(console, request, watcher_id, CommandVerb.APPROVE)

    @routes.post("/ui/watches/{watcher_id}/reject")
    async def reject(request: Request, watcher_id: str) -> Response:
        return await _lifecycle(console, request, watcher_id, CommandVerb.CANCEL)

    return routes


def _page(console: Console, request: Request, watcher_id: str) -> Response:
    services = console.services
    session = console.session(request)
    who = session.principal
    if len(watcher_id) > 200:
        raise ApiError(ApiCode.NOT_FOUND, "no such watcher")
    tenant, user = who.tenant_id, who.user_id
    if not may_see(who, Verb.SHOW):
        raise ApiError(ApiCode.NOT_FOUND, "no such watcher")  # before any read
    receipts = may_see(who, Verb.EVALUATIONS)
    reading = None
    if receipts:
        reading = console.pool.submit(services.ledger.deliveries, tenant, user, None, watcher_id)
    guess = console.sources.get((tenant, user, watcher_id))
    early = None
    if guess is not None and receipts:
        early = console.pool.submit(
            services.ledger.evaluations, tenant, user, watcher_id, guess, PAGE_SIZE
        )
    moves = console.pool.submit(services.ledger.lifecycle, tenant, user, watcher_id)
    try:
        view = console.watcher(who, watcher_id)
    except BaseException:
        for pending in (reading, early, moves):
            if pending is not None:
                pending.cancel()
        raise
    evaluations, erased = (
        _receipts(console, who, watcher_id, view["source_id"], guess, early)
        if receipts
        else ([], 0)
    )
    deliveries: list[dict[str, Any]] = (
        [] if reading is None else guarded(partial(reading.result, READ_TIMEOUT_S))
    )
    history: list[dict[str, Any]] = guarded(partial(moves.result, READ_TIMEOUT_S))
    by_key = {d["delivery_key"]: d for d in deliveries}
    for evaluation in evaluations:
        evaluation["delivery"] = by_key.get(evaluation.get("delivery_key") or "")
    return console.render(
        "watch.html",
        session,
        watch=view,
        words=proposal_words(view["definition"]),
        evaluations=evaluations,
        history=history,
        erased=erased,
        deliveries=deliveries[:PAGE_SIZE],
    )


def _receipts(
    console: Console,
    who: Principal,
    watcher_id: str,
    source: str,
    guess: str | None,
    early: Future[Any] | None,
) -> Any:
    """The watcher's receipts and how many were erased: the early read when it guessed the
    ``source`` the answer names, else a read of that source's partition now."""
    if early is not None and guess == source:
        return guarded(partial(early.result, READ_TIMEOUT_S))
    if early is not None:
        early.cancel()
    read = console.services.ledger.evaluations
    return guarded(partial(read, who.tenant_id, who.user_id, watcher_id, source, PAGE_SIZE))


async def _lifecycle(
    console: Console, request: Request, watcher_id: str, verb: CommandVerb
) -> Response:
    session: Session | None = None
    try:
        session, _ = await console.posted(request)
        who = session.principal
        await run_in_threadpool(
            run_command,
            console.services,
            verb,
            who,
            who.tenant_id,
            who.user_id,
            watcher_id=watcher_id,
        )
    except Refused as refused:
        return console.refused(None, refused)
    except ApiError as exc:
        return console.refused(session, exc)
    target = f"/ui/watches/{watcher_id}" if verb is CommandVerb.APPROVE else "/ui/proposals"
    return secure_headers(RedirectResponse(target, status_code=303))
