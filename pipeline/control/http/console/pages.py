"""The console's pages under ``/ui/`` (DESIGN.md §9): watches, a watcher, proposals,
schedules, deliveries; sign in and out; every form guarded by its CSRF token.

Every page acts for the signed-in principal's own subject, through the same ports as the API
(:class:`~pipeline.control.http.common.ApiServices`): lists and changes are commands the command
processor decides (so roles, grants and the cap hold exactly as over ``/v1``; another tenant's
watcher or delivery is "not found", a 404 page), reads of receipts and deliveries come after
the same checks the API makes. Agents (and scoped chats) see no proposals page and cannot
approve: the page is a 404 for them and the processor refuses the command anyway. Lists are
filtered and paginated on the server (:data:`PAGE_SIZE` rows). No page reads the log for a role
that may not read it (checked first, ``authz.may``). The watches list's last outcomes are read
once the ``list`` answered, from the listed rows' partitions only (one read, not one per row); a
watcher page's reads run beside its ``show`` round trip and are shown only once it answered:
lifecycle records, deliveries and — when its source is known from an earlier page
(:class:`KnownSources`, a hint the answer checks) — its receipts.

A ``GET`` without a session goes to the sign-in page; a ``POST`` without a session or without
its session's CSRF token is refused (403) before anything is decided. Bodies are URL-encoded
forms of at most :data:`MAX_FORM` bytes. Left out: sessions and headers (``sessions``), words
and templates (``render``), the API routes (``pipeline.control.http``).
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.common import ApiServices, StatusPort, guarded, run_command
from pipeline.control.http.console.render import environment, proposal_words
from pipeline.control.http.console.schedules import cancel_schedule, chat_schedules
from pipeline.control.http.console.sessions import (
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    Session,
    SessionsFullError,
    SessionStore,
    same_token,
    secure_headers,
    set_cookie,
)
from pipeline.control.http.console.sources import KnownSources
from pipeline.control.http.deliveries import granted, may_read, read_one
from pipeline.control.schedules import next_look
from pipeline.rules.authz import Principal, Role, Subject, Verb, may
from pipeline.rules.commands.context import AGENT_CAP
from pipeline.rules.commands.model import CommandVerb

__all__ = ["MAX_FORM", "PAGE_SIZE", "Console", "install_console"]

PAGE_SIZE: Final = 50
_READ_TIMEOUT_S: Final = 30.0
MAX_FORM: Final = 16_384
_FORM_TYPE: Final = "application/x-www-form-urlencoded"
_NO_PROPOSALS: Final = (Role.AGENT, Role.SCOPED_CHAT)
_WATCH_STATES: Final = ("active", "proposed", "paused", "closed")
_DELIVERY_STATES: Final = (
    "pending",
    "dispatching",
    "delivered",
    "dead",
    "suppressed",
    "cancelled",
)


class _SignIn(Exception):
    """No session: a page goes to the sign-in form."""


class _Refused(Exception):
    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


def _page_number(request: Request) -> int:
    raw = request.query_params.get("page", "1")
    return int(raw) if raw.isdigit() and 0 < len(raw) < 7 else 1


def _query(request: Request, name: str, allowed: tuple[str, ...] | None = None) -> str | None:
    value = request.query_params.get(name) or None
    if value is None or len(value) > 200:
        return None
    if allowed is not None and value not in allowed:
        return None
    return value


def _paged(rows: list[Any], page: int) -> tuple[list[Any], int]:
    pages = max(1, -(-len(rows) // PAGE_SIZE))
    page = min(page, pages)
    return rows[(page - 1) * PAGE_SIZE : page * PAGE_SIZE], pages


class Console:
    """The pages over ``services``; sessions live in this process."""

    def __init__(
        self,
        services: ApiServices,
        *,
        sessions: SessionStore | None = None,
        status: StatusPort | None = None,
    ) -> None:
        self.services = services
        self.sessions = sessions or SessionStore(per_principal=services.sessions_per_principal)
        self.status = status
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="console-read")
        self.sources = KnownSources()
        self.env = environment()
        self.css = (
            resources.files("pipeline.control.http.console")
            .joinpath("static/console.css")
            .read_bytes()
        )

    # -- responses -------------------------------------------------------------------------

    def render(
        self,
        template: str,
        session: Session | None,
        status_code: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        started = time.perf_counter()
        principal = None if session is None else session.principal
        header = None
        if session is not None and self.status is not None:
            header = self.status.header(session.principal)
        html = self.env.get_template(template).render(
            principal=principal,
            csrf=None if session is None else session.csrf,
            proposals_visible=principal is not None and principal.role not in _NO_PROPOSALS,
            status=header,
            **context,
        )
        response = HTMLResponse(html, status_code=status_code)
        response.headers["Server-Timing"] = (
            f"render;dur={(time.perf_counter() - started) * 1e3:.1f}"
        )
        return secure_headers(response)

    def error(
        self, session: Session | None, status: int, message: str, retry_after: float | None = None
    ) -> HTMLResponse:
        response = self.render("error.html", session, status, code=status, message=message)
        if retry_after is not None:
            response.headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
        return response

    def refused(self, session: Session | None, refused: _Refused | ApiError) -> HTMLResponse:
        """A refusal as its error page (with ``Retry-After`` when it says when to come back)."""
        status = refused.status
        return self.error(session, status, refused.message, refused.retry_after)

    # -- sessions and forms ----------------------------------------------------------------

    def session(self, request: Request) -> Session:
        """The request's session, its principal's request spent (429 past its rate)."""
        found = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if found is None:
            raise _SignIn()
        self.spend(found.principal)
        return found

    def spend(self, who: Principal) -> None:
        """One request of ``who``'s rate, shared with its ``/v1`` requests (else 429)."""
        limiter = self.services.limiter
        wait = None if limiter is None else limiter.take(who.name)
        if wait is not None:
            raise _Refused(429, "too many requests: wait a moment and reload", wait)

    async def form(self, request: Request) -> dict[str, str]:
        """A URL-encoded form of at most :data:`MAX_FORM` bytes (else refused)."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != _FORM_TYPE:
            raise _Refused(415, "forms only")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM:
                raise _Refused(413, "form too large")
        try:
            parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
        except (UnicodeDecodeError, ValueError):
            raise _Refused(400, "not a form") from None
        return {name: values[0] for name, values in parsed.items() if values}

    async def posted(self, request: Request) -> tuple[Session, dict[str, str]]:
        """The session and form of a ``POST``; 403 without either or without its CSRF token."""
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is None:
            raise _Refused(403, "sign in first")
        self.spend(session.principal)
        form = await self.form(request)
        if not same_token(form.get("csrf"), session.csrf):
            raise _Refused(403, "the form's CSRF token is missing or wrong: reload the page")
        return session, form

    # -- reads -----------------------------------------------------------------------------

    def page_of(
        self, who: Principal, page: int, *, size: int = PAGE_SIZE, **filters: Any
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of the subject's watchers (filtered by the command processor) and the
        number of all that match."""
        result = run_command(
            self.services,
            CommandVerb.LIST,
            who,
            who.tenant_id,
            who.user_id,
            offset=(page - 1) * PAGE_SIZE,
            limit=size,
            **filters,
        )
        shown = list(result.get("watchers", []))
        for view in shown:
            self.sources.remember(who.tenant_id, who.user_id, view)
        return shown, int(result.get("total", 0))

    def watcher(self, who: Principal, watcher_id: str) -> dict[str, Any]:
        view: dict[str, Any] = run_command(
            self.services,
            CommandVerb.SHOW,
            who,
            who.tenant_id,
            who.user_id,
            watcher_id=watcher_id,
        )
        self.sources.remember(who.tenant_id, who.user_id, view)
        return view


def install_console(
    app: FastAPI, services: ApiServices, *, status: StatusPort | None = None
) -> Console:
    """Mount the console on ``app`` under ``/ui/``."""
    console = Console(services, status=status)
    router = APIRouter(include_in_schema=False)
    _routes(router, console)
    app.include_router(router)
    return console


def _guard(console: Console, request: Request, action: Callable[[], Response]) -> Response:
    try:
        return action()
    except _SignIn:
        return secure_headers(RedirectResponse("/ui/sign-in", status_code=303))
    except (_Refused, ApiError) as refused:
        session = console.sessions.get(request.cookies.get(SESSION_COOKIE))
        return console.refused(session, refused)


def _routes(router: APIRouter, console: Console) -> None:
    services = console.services

    @router.get("/ui")
    @router.get("/ui/")
    def home() -> Response:
        return secure_headers(RedirectResponse("/ui/watches", status_code=303))

    @router.get("/ui/static/console.css")
    def css() -> Response:
        response = Response(console.css, media_type="text/css")
        response.headers["Cache-Control"] = "max-age=300"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    # -- sign in and out ---------------------------------------------------------------------

    @router.get("/ui/sign-in")
    def sign_in_form(request: Request) -> Response:
        token = secrets.token_urlsafe(32)
        response = console.render("sign_in.html", None, sign_in_csrf=token, failed=False)
        set_cookie(response, request, SIGN_IN_COOKIE, token, 600, services.secure_cookie)
        return response

    @router.post("/ui/sign-in")
    async def sign_in(request: Request) -> Response:
        try:
            _throttle_sign_in(services, request)
            form = await console.form(request)
        except _Refused as refused:
            return console.refused(None, refused)
        if not same_token(form.get("csrf"), request.cookies.get(SIGN_IN_COOKIE)):
            return console.error(None, 403, "the form's CSRF token is missing or wrong: reload")
        try:
            principal = services.tokens.authenticate(f"Bearer {form.get('token', '')}")
        except ApiError:
            return console.render(
                "sign_in.html", None, 401, sign_in_csrf=form.get("csrf"), failed=True
            )
        try:
            session = console.sessions.open(principal)
        except SessionsFullError as exc:
            return console.error(None, 503, str(exc), 60.0)
        response = secure_headers(RedirectResponse("/ui/watches", status_code=303))
        set_cookie(response, request, SESSION_COOKIE, session.sid, 8 * 3600, services.secure_cookie)
        response.delete_cookie(SIGN_IN_COOKIE, path="/ui")
        return response

    @router.post("/ui/sign-out")
    async def sign_out(request: Request) -> Response:
        try:
            session, _ = await console.posted(request)
        except _Refused as refused:
            return console.refused(None, refused)
        console.sessions.close(session.sid)
        response = secure_headers(RedirectResponse("/ui/sign-in", status_code=303))
        response.delete_cookie(SESSION_COOKIE, path="/ui")
        return response

    # -- watches -----------------------------------------------------------------------------

    @router.get("/ui/watches")
    def watches(request: Request) -> Response:
        def page() -> Response:
            session = console.session(request)
            who = session.principal
            state = _query(request, "state", _WATCH_STATES)
            source = _query(request, "source")
            chat = _query(request, "session")
            notice = None
            page_number = _page_number(request)
            try:
                shown, total = console.page_of(
                    who, page_number, state=state, session_id=chat, source_id=source
                )
            except ApiError as exc:
                if exc.code is not ApiCode.DENIED:
                    raise
                shown, total = [], 0
                notice = exc.message  # no grant to manage anything: nothing to list
            # Each row's last outcome is its newest receipt: read once the command processor
            # listed the rows (authorized: no read before), from their sources' partitions
            # only, and only by a role that may read receipts at all.
            sources = {str(row.get("source_id", "")) for row in shown}
            last: dict[str, dict[str, Any]] = {}
            if shown and _may(who, Verb.EVALUATIONS):
                read = services.ledger.latest
                last = guarded(partial(read, who.tenant_id, who.user_id, sorted(sources)))
            now = services.clock.now()
            for row in shown:
                live = row.get("status") == "active"
                row["next_look"] = next_look(row.get("definition") or {}, now) if live else None
                row["last"] = last.get(row.get("watcher_id", ""))
            pages = max(1, -(-total // PAGE_SIZE))
            filters = {k: v for k, v in (("state", state), ("source", source), ("session", chat))}
            return console.render(
                "watches.html",
                session,
                notice=notice,
                watchers=shown,
                total=total,
                page=min(page_number, pages),
                pages=pages,
                filters=filters,
                states=_WATCH_STATES,
                query=lambda **changes: urlencode(
                    {k: v for k, v in {**filters, **changes}.items() if v is not None}
                ),
            )

        return _guard(console, request, page)

    @router.get("/ui/watches/{watcher_id}")
    def watch(request: Request, watcher_id: str) -> Response:
        def page() -> Response:
            session = console.session(request)
            who = session.principal
            if len(watcher_id) > 200:
                raise ApiError(ApiCode.NOT_FOUND, "no such watcher")
            tenant, user = who.tenant_id, who.user_id
            if not _may(who, Verb.SHOW):
                raise ApiError(ApiCode.NOT_FOUND, "no such watcher")  # before any read
            # The watcher's deliveries, and its receipts when its source (their partition) is
            # known from an earlier page, are read while the command processor answers ``show``
            # (they are the subject's own, filtered by subject; shown only once it answered),
            # by a role that may read them (checked first: no read starts before that).
            receipts = _may(who, Verb.EVALUATIONS)
            reading = None
            if receipts:
                reading = console.pool.submit(
                    services.ledger.deliveries, tenant, user, None, watcher_id
                )
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
            source = view["source_id"]
            if not receipts:
                evaluations, erased = [], 0
            elif early is not None and guess == source:
                evaluations, erased = guarded(partial(early.result, _READ_TIMEOUT_S))
            else:  # not known yet, or the source moved: read its partition now
                if early is not None:
                    early.cancel()
                read = services.ledger.evaluations
                evaluations, erased = guarded(
                    partial(read, tenant, user, watcher_id, source, PAGE_SIZE)
                )
            deliveries: list[dict[str, Any]] = (
                [] if reading is None else guarded(partial(reading.result, _READ_TIMEOUT_S))
            )
            history: list[dict[str, Any]] = guarded(partial(moves.result, _READ_TIMEOUT_S))
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

        return _guard(console, request, page)

    async def _lifecycle(request: Request, watcher_id: str, verb: CommandVerb) -> Response:
        session: Session | None = None
        try:
            session, _ = await console.posted(request)
            who = session.principal
            await run_in_threadpool(
                run_command,
                services,
                verb,
                who,
                who.tenant_id,
                who.user_id,
                watcher_id=watcher_id,
            )
        except _Refused as refused:
            return console.refused(None, refused)
        except ApiError as exc:
            return console.refused(session, exc)
        target = f"/ui/watches/{watcher_id}" if verb is CommandVerb.APPROVE else "/ui/proposals"
        return secure_headers(RedirectResponse(target, status_code=303))

    @router.post("/ui/watches/{watcher_id}/approve")
    async def approve(request: Request, watcher_id: str) -> Response:
        return await _lifecycle(request, watcher_id, CommandVerb.APPROVE)

    @router.post("/ui/watches/{watcher_id}/reject")
    async def reject(request: Request, watcher_id: str) -> Response:
        return await _lifecycle(request, watcher_id, CommandVerb.CANCEL)

    # -- proposals ---------------------------------------------------------------------------

    @router.get("/ui/proposals")
    def proposals(request: Request) -> Response:
        def page() -> Response:
            session = console.session(request)
            who = session.principal
            if who.role in _NO_PROPOSALS:
                raise ApiError(ApiCode.NOT_FOUND, "no such page")
            page_number = _page_number(request)
            proposed, total = console.page_of(who, page_number, state="proposed")
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
            pages = max(1, -(-total // PAGE_SIZE))
            return console.render(
                "proposals.html",
                session,
                proposals=rows,
                total=total,
                page=min(page_number, pages),
                pages=pages,
            )

        return _guard(console, request, page)

    # -- schedules ---------------------------------------------------------------------------

    @router.get("/ui/schedules")
    def schedules(request: Request) -> Response:
        def page() -> Response:
            session = console.session(request)
            chats, notice = chat_schedules(
                services, console.pool, session.principal, _READ_TIMEOUT_S
            )
            return console.render("schedules.html", session, chats=chats, notice=notice)

        return _guard(console, request, page)

    @router.post("/ui/schedules/cancel")
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
        except _Refused as refused:
            return console.refused(None, refused)
        except ApiError as exc:
            return console.refused(session, exc)
        return secure_headers(RedirectResponse("/ui/schedules", status_code=303))

    # -- deliveries --------------------------------------------------------------------------

    @router.get("/ui/deliveries")
    def deliveries(request: Request) -> Response:
        def page() -> Response:
            session = console.session(request)
            who = session.principal
            tenant, user = who.tenant_id, who.user_id
            may_read(who, tenant, user)
            granted(services, who, tenant, user)
            state = _query(request, "state", _DELIVERY_STATES)
            watcher_id = _query(request, "watcher")
            rows = guarded(lambda: services.ledger.deliveries(tenant, user, state, watcher_id))
            shown, pages = _paged(rows, _page_number(request))
            filters = {"state": state, "watcher": watcher_id}
            return console.render(
                "deliveries.html",
                session,
                deliveries=shown,
                total=len(rows),
                page=min(_page_number(request), pages),
                pages=pages,
                filters=filters,
                states=_DELIVERY_STATES,
                query=lambda **changes: urlencode(
                    {k: v for k, v in {**filters, **changes}.items() if v is not None}
                ),
            )

        return _guard(console, request, page)

    @router.post("/ui/deliveries/{delivery_key}/redeliver")
    async def redeliver(request: Request, delivery_key: str) -> Response:
        session: Session | None = None
        try:
            session, _ = await console.posted(request)
            who = session.principal
            found = await run_in_threadpool(_redeliver, services, who, delivery_key)
        except _Refused as refused:
            return console.refused(None, refused)
        except ApiError as exc:
            return console.refused(session, exc)
        target = f"/ui/deliveries?{urlencode({'watcher': found['watcher_id']})}"
        return secure_headers(RedirectResponse(target, status_code=303))


def _throttle_sign_in(services: ApiServices, request: Request) -> None:
    """Sign-in attempts per client address (``[api] sign_in_per_minute``), before the form is
    read or a token hashed: guessing tokens is slow, whoever guesses."""
    address = request.client.host if request.client is not None else "unknown"
    limiter = services.sign_ins
    wait = None if limiter is None else limiter.take(address)
    if wait is not None:
        raise _Refused(429, "too many sign-in attempts: wait a minute", wait)


def _may(who: Principal, verb: Verb) -> bool:
    """Whether ``who``'s role may ``verb`` its own subject's objects: checked before a page
    starts any read of the log (a publisher or an agent starts none it may not make)."""
    return may(who, verb, Subject(who.tenant_id, who.user_id)).allowed


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
