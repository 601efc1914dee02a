"""The console's sign-in and sign-out: a bearer token for a session cookie, behind a per-address
throttle and a sign-in CSRF cookie. Owns :func:`router`. Left out: the sessions themselves
(``console.sessions``) and authenticating a token (``services.tokens``).
"""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from pipeline.control.http.auth import ApiError
from pipeline.control.http.common import ApiServices
from pipeline.control.http.console.core import Console, Refused
from pipeline.control.http.console.sessions import (
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    SessionsFullError,
    same_token,
    secure_headers,
    set_cookie,
)

__all__ = ["router"]


def router(console: Console) -> APIRouter:
    routes = APIRouter(include_in_schema=False)
    services = console.services

    @routes.get("/ui/sign-in")
    def sign_in_form(request: Request) -> Response:
        token = secrets.token_urlsafe(32)
        response = console.render("sign_in.html", None, sign_in_csrf=token, failed=False)
        set_cookie(response, request, SIGN_IN_COOKIE, token, 600, services.secure_cookie)
        return response

    @routes.post("/ui/sign-in")
    async def sign_in(request: Request) -> Response:
        try:
            _throttle(services, request)
            form = await console.form(request)
        except Refused as refused:
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

    @routes.post("/ui/sign-out")
    async def sign_out(request: Request) -> Response:
        try:
            session, _ = await console.posted(request)
        except Refused as refused:
            return console.refused(None, refused)
        console.sessions.close(session.sid)
        response = secure_headers(RedirectResponse("/ui/sign-in", status_code=303))
        response.delete_cookie(SESSION_COOKIE, path="/ui")
        return response

    return routes


def _throttle(services: ApiServices, request: Request) -> None:
    """Sign-in attempts per client address (``[api] sign_in_per_minute``), before the form is
    read or a token hashed: guessing tokens is slow, whoever guesses."""
    address = request.client.host if request.client is not None else "unknown"
    limiter = services.sign_ins
    wait = None if limiter is None else limiter.take(address)
    if wait is not None:
        raise Refused(429, "too many sign-in attempts: wait a minute", wait)
