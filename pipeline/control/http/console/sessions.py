"""Console sessions: sign in once with a bearer token, then a cookie (DESIGN.md §9 ``/ui/``).

Owns :class:`SessionStore` — sessions held in this process's memory (bounded in number and
age), each a random id naming the principal the token authenticated and that session's CSRF
token — the cookie that carries the id (``HttpOnly``, ``SameSite=Strict``, path ``/ui``,
``Secure`` over HTTPS), the sign-in form's own CSRF cookie (double submit: there is no session
to hold its token yet), constant-time token comparison, and the security headers every console
response carries: a strict Content-Security-Policy (no script at all, styles from this origin
only, no framing, forms post only here), ``no-store``, ``nosniff`` and ``no-referrer``.

The bearer token itself is never stored or echoed: only the principal it named. A restarted
API forgets every session (sign in again). Left out: the pages (``pages``).
"""

from __future__ import annotations

import hmac
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
    "same_token",
    "secure_headers",
    "set_cookie",
]

SESSION_COOKIE: Final = "vigil_session"
SIGN_IN_COOKIE: Final = "vigil_sign_in"
COOKIE_PATH: Final = "/ui"
DEFAULT_TTL_S: Final = 8 * 3600.0
DEFAULT_MAX_SESSIONS: Final = 10_000

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


class SessionStore:
    """Sessions by id, oldest evicted first past ``max_sessions``; each lives ``ttl_s``."""

    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_s
        self._max = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, principal: Principal) -> Session:
        session = Session(
            sid=secrets.token_urlsafe(32),
            principal=principal,
            csrf=secrets.token_urlsafe(32),
            expires_at=self._clock() + self._ttl_s,
        )
        with self._lock:
            self._sessions[session.sid] = session
            while len(self._sessions) > self._max:
                self._sessions.popitem(last=False)
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
                del self._sessions[sid]
                return None
            return session

    def close(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._sessions.pop(sid, None)


def same_token(given: str | None, expected: str | None) -> bool:
    """Whether a submitted token is the expected one (constant time; empty never matches)."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def set_cookie(response: Response, request: Request, name: str, value: str, max_age: int) -> None:
    """An ``HttpOnly``, ``SameSite=Strict`` cookie for ``/ui`` (``Secure`` over HTTPS)."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


_R = TypeVar("_R", bound=Response)


def secure_headers(response: _R) -> _R:
    """``response`` with the console's security headers."""
    for name, value in _HEADERS.items():
        response.headers[name] = value
    return response
