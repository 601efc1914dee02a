"""What every console page shares: :class:`Console` (sessions, the rate, forms, rendering, the
subject's watchers) and the helpers the page routers use to read a query and turn refusals into
error pages. Every page acts for the signed-in principal's own subject through the API's ports
(:class:`~pipeline.control.http.common.ApiServices`); bodies are URL-encoded forms of at most
:data:`MAX_FORM` bytes and lists show :data:`PAGE_SIZE` rows. Left out: the routes (one module
per page), sessions and headers (``sessions``), words and templates (``render``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qs, urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from pipeline.control.http.auth import ApiError
from pipeline.control.http.common import ApiServices, StatusPort, run_command
from pipeline.control.http.console.render import environment
from pipeline.control.http.console.sessions import (
    SESSION_COOKIE,
    Session,
    SessionStore,
    same_token,
    secure_headers,
)
from pipeline.control.http.console.sources import KnownSources
from pipeline.rules.authz import Principal, Role, Subject, Verb, may
from pipeline.rules.commands.model import CommandVerb

__all__ = [
    "MAX_FORM",
    "NO_PROPOSALS",
    "PAGE_SIZE",
    "READ_TIMEOUT_S",
    "Console",
    "Refused",
    "SignIn",
    "filter_query",
    "guard",
    "may_see",
    "page_count",
    "page_number",
    "paged",
    "query_param",
]

PAGE_SIZE: Final = 50
READ_TIMEOUT_S: Final = 30.0
MAX_FORM: Final = 16_384
_FORM_TYPE: Final = "application/x-www-form-urlencoded"
NO_PROPOSALS: Final = (Role.AGENT, Role.SCOPED_CHAT)


class SignIn(Exception):
    """No session: a page goes to the sign-in form."""


class Refused(Exception):
    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


def page_number(request: Request) -> int:
    raw = request.query_params.get("page", "1")
    return int(raw) if raw.isdigit() and 0 < len(raw) < 7 else 1


def query_param(request: Request, name: str, allowed: tuple[str, ...] | None = None) -> str | None:
    value = request.query_params.get(name) or None
    if value is None or len(value) > 200:
        return None
    if allowed is not None and value not in allowed:
        return None
    return value


def page_count(total: int) -> int:
    return max(1, -(-total // PAGE_SIZE))


def paged(rows: list[Any], page: int) -> tuple[list[Any], int]:
    pages = page_count(len(rows))
    page = min(page, pages)
    return rows[(page - 1) * PAGE_SIZE : page * PAGE_SIZE], pages


def filter_query(filters: dict[str, str | None]) -> Callable[..., str]:
    """A list page's query string maker: its filters with ``changes`` (a page, a state)."""
    return lambda **changes: urlencode(
        {k: v for k, v in {**filters, **changes}.items() if v is not None}
    )


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
            proposals_visible=principal is not None and principal.role not in NO_PROPOSALS,
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

    def refused(self, session: Session | None, refused: Refused | ApiError) -> HTMLResponse:
        """A refusal as its error page (with ``Retry-After`` when it says when to come back)."""
        status = refused.status
        return self.error(session, status, refused.message, refused.retry_after)

    # -- sessions and forms ----------------------------------------------------------------

    def session(self, request: Request) -> Session:
        """The request's session, its principal's request spent (429 past its rate)."""
        found = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if found is None:
            raise SignIn()
        self.spend(found.principal)
        return found

    def spend(self, who: Principal) -> None:
        """One request of ``who``'s rate, shared with its ``/v1`` requests (else 429)."""
        limiter = self.services.limiter
        wait = None if limiter is None else limiter.take(who.name)
        if wait is not None:
            raise Refused(429, "too many requests: wait a moment and reload", wait)

    async def form(self, request: Request) -> dict[str, str]:
        """A URL-encoded form of at most :data:`MAX_FORM` bytes (else refused)."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != _FORM_TYPE:
            raise Refused(415, "forms only")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM:
                raise Refused(413, "form too large")
        try:
            parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
        except (UnicodeDecodeError, ValueError):
            raise Refused(400, "not a form") from None
        return {name: values[0] for name, values in parsed.items() if values}

    async def posted(self, request: Request) -> tuple[Session, dict[str, str]]:
        """The session and form of a ``POST``; 403 without either or without its CSRF token."""
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is None:
            raise Refused(403, "sign in first")
        self.spend(session.principal)
        form = await self.form(request)
        if not same_token(form.get("csrf"), session.csrf):
            raise Refused(403, "the form's CSRF token is missing or wrong: reload the page")
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


def guard(console: Console, request: Request, action: Callable[[], Response]) -> Response:
    try:
        return action()
    except SignIn:
        return secure_headers(RedirectResponse("/ui/sign-in", status_code=303))
    except (Refused, ApiError) as refused:
        session = console.sessions.get(request.cookies.get(SESSION_COOKIE))
        return console.refused(session, refused)


def may_see(who: Principal, verb: Verb) -> bool:
    """Whether ``who``'s role may ``verb`` its own subject's objects: checked before a page
    starts any read of the log (a publisher or an agent starts none it may not make)."""
    return may(who, verb, Subject(who.tenant_id, who.user_id)).allowed
