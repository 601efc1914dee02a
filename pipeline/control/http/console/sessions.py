"""Console sessions: sign in once with a bearer token, then a cookie (DESIGN.md §9 ``/ui/``).

Owns :class:`SessionStore` (in-memory, bounded sessions naming a principal and its CSRF token), the
session cookie (``HttpOnly``, ``SameSite=Strict``, path ``/ui``, ``Secure`` unless ``[api]
secure_cookie = "auto"`` on loopback http), the sign-in form's double-submit CSRF cookie and the
security headers (strict CSP, ``no-store``, ``nosniff``, ``no-referrer``). The token is never stored
or echoed; a restarted API forgets every session. Left out: the pages."""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from pipeline.rules.authz import Principal

__all__ = [
    "CSP",
    "SESSION_COOKIE",
    "SIGN_IN_COOKIE",
    "Session",
    "SessionStore",
    "SessionsFullError",
    "same_token",
    "secure_headers",
    "set_cookie",
]

SESSION_COOKIE: Final = "vigil_session"
SIGN_IN_COOKIE: Final = "vigil_sign_in"
COOKIE_PATH: Final = "/ui"
DEFAULT_TTL_S: Final = 8 * 3600.0
DEFAULT_MAX_SESSIONS: Final = 10_000
DEFAULT_PER_PRINCIPAL: Final = 20
_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost."})

CSP: Final = (
    "default-src 'none'; script-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


@dataclass(frozen=True, slots=True)
class Session:
    """One signed-in browser: who it is and the token its forms must carry."""

    sid: str
    principal: Principal
    csrf: str
    expires_at: float


class SessionsFullError(Exception):
    """Every session slot holds a live session: the sign-in is refused (503), no one evicted."""


class SessionStore:
    """Sessions by id; each lives ``ttl_s``. One principal keeps at most ``per_principal`` (its
    oldest goes first); all together at most ``max_sessions`` (then a sign-in is refused)."""

    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        per_principal: int = DEFAULT_PER_PRINCIPAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_s
        self._max = max_sessions
        self._per_principal = per_principal
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._by_principal: dict[str, OrderedDict[str, None]] = {}
        self._lock = threading.Lock()

    def open(self, principal: Principal) -> Session:
        """A new session of ``principal``; :class:`SessionsFullError` when none is free."""
        session = Session(
            sid=secrets.token_urlsafe(32),
            principal=principal,
            csrf=secrets.token_urlsafe(32),
            expires_at=self._clock() + self._ttl_s,
        )
        with self._lock:
            own = self._by_principal.setdefault(principal.name, OrderedDict())
            while len(own) >= self._per_principal:
                self._drop(next(iter(own)))  # this principal's oldest, never another's
            if len(self._sessions) >= self._max:
                self._drop_expired()
            if len(self._sessions) >= self._max:
                raise SessionsFullError("every console session is in use: try again later")
            self._sessions[session.sid] = session
            self._by_principal.setdefault(principal.name, OrderedDict())[session.sid] = None
        return session

    def get(self, sid: str | None) -> Session | None:
        """The live session ``sid`` names; None for a missing, unknown or expired one."""
        if not sid or len(sid) > 128:
            return None
        with self._lock:
            session = self._sessions.get(sid)
            if session is None:
                return None
            if session.expires_at <= self._clock():
                self._drop(sid)
                return None
            return session

    def close(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._drop(sid)

    def _drop(self, sid: str) -> None:
        session = self._sessions.pop(sid, None)
        if session is None:
            return
        own = self._by_principal.get(session.principal.name)
        if own is not None:
            own.pop(sid, None)
            if not own:
                del self._by_principal[session.principal.name]

    def _drop_expired(self) -> None:
        now = self._clock()
        for sid in [sid for sid, s in self._sessions.items() if s.expires_at <= now]:
            self._drop(sid)


def same_token(given: str | None, expected: str | None) -> bool:
    """Whether a submitted token is the expected one (constant time; empty never matches)."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def set_cookie(
    response: Response,
    request: Request,
    name: str,
    value: str,
    max_age: int,
    secure: str = "auto",
) -> None:
    """An ``HttpOnly``, ``SameSite=Strict`` cookie for ``/ui``, ``Secure`` unless ``secure`` is
    ``auto`` and the request is plain http between loopback addresses (:func:`loopback_http`)."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=secure != "auto" or not loopback_http(request),
    )


def loopback_http(request: Request) -> bool:
    """Plain http from a loopback client to a loopback host name: the one case (a developer's
    own machine) where a browser could not send a ``Secure`` cookie back. Behind a proxy, the
    proxy is the client: a deployment there sets ``[api] secure_cookie = "always"``."""
    if request.url.scheme != "http" or request.client is None:
        return False
    return _loopback(request.client.host) and _loopback(request.url.hostname or "")


def _loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


_R = TypeVar("_R", bound=Response)


def secure_headers(response: _R) -> _R:
    """``response`` with the console's security headers."""
    for name, value in _HEADERS.items():
        response.headers[name] = value
    return response
