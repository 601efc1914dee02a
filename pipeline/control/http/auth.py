"""Who is calling the HTTP API, and how its refusals read (DESIGN.md §9, §10).

Owns the error vocabulary (:class:`ApiCode` with its status, :class:`ApiError`), the protocol check
(``Vigil-Protocol-Version: 1``, else 400 ``protocol_version``), :class:`TokenDirectory` (bearer
token → :class:`~pipeline.rules.authz.Principal`, by SHA-256 digest compared in constant time
against every configured one) and the command processor's result codes as API codes. Left out:
deciding watches or grants (the command processor) and the routes (``api``)."""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from pipeline.config import PrincipalConfig
from pipeline.rules.authz import Principal
from pipeline.rules.commands.model import CommandError, ResultCode
from pipeline.rules.errors import VigilError

__all__ = [
    "PROTOCOL_HEADER",
    "PROTOCOL_VERSION",
    "ApiCode",
    "ApiError",
    "TokenDirectory",
    "check_protocol",
    "from_command_error",
    "status_of",
]

PROTOCOL_HEADER: Final = "Vigil-Protocol-Version"
PROTOCOL_VERSION: Final = "1"
_SCHEME: Final = "bearer"


class ApiCode(StrEnum):
    """The closed set of API error codes (DESIGN.md §9), plus ``too_large`` for a body over the
    bound (413, DESIGN.md §10), ``rate_limited`` for a caller over its request rate (429, with
    ``Retry-After``) and ``unavailable`` for a broker or command processor that does not answer,
    or every command client busy past the wait (a 503, never a guess)."""

    INVALID = "invalid"
    PROTOCOL_VERSION = "protocol_version"
    UNAUTHENTICATED = "unauthenticated"
    DENIED = "denied"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    STALE_REVISION = "stale_revision"
    CAP_REACHED = "cap_reached"
    TOO_LARGE = "too_large"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"


_STATUS: Final[dict[ApiCode, int]] = {
    ApiCode.INVALID: 422,
    ApiCode.PROTOCOL_VERSION: 400,
    ApiCode.UNAUTHENTICATED: 401,
    ApiCode.DENIED: 403,
    ApiCode.NOT_FOUND: 404,
    ApiCode.CONFLICT: 409,
    ApiCode.STALE_REVISION: 409,
    ApiCode.CAP_REACHED: 409,
    ApiCode.TOO_LARGE: 413,
    ApiCode.RATE_LIMITED: 429,
    ApiCode.UNAVAILABLE: 503,
}

_FROM_RESULT: Final[dict[ResultCode, ApiCode]] = {
    ResultCode.INVALID: ApiCode.INVALID,
    ResultCode.DENIED: ApiCode.DENIED,
    ResultCode.NOT_FOUND: ApiCode.NOT_FOUND,
    ResultCode.CONFLICT: ApiCode.CONFLICT,
    ResultCode.STALE_REVISION: ApiCode.STALE_REVISION,
    ResultCode.CAP_REACHED: ApiCode.CAP_REACHED,
}


def status_of(code: ApiCode) -> int:
    return _STATUS[code]


class ApiError(VigilError):
    """A refusal on its way to the caller. Raised by routes, rendered by the app's handler;
    it never leaves the HTTP edge (``VigilError`` subclasses elsewhere are translated into it).
    ``retry_after`` (seconds) becomes the ``Retry-After`` header of a 429 or 503."""

    def __init__(
        self,
        code: ApiCode,
        message: str,
        field: str | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        """The headers the refusal carries: ``WWW-Authenticate`` on a 401, ``Retry-After``
        when the caller is told when to come back."""
        headers: dict[str, str] = {}
        if self.code is ApiCode.UNAUTHENTICATED:
            headers["WWW-Authenticate"] = "Bearer"
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
        return headers

    @property
    def status(self) -> int:
        return _STATUS[self.code]

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code.value, "message": self.message, "field": self.field}}


def from_command_error(error: CommandError) -> ApiError:
    """The command processor's refusal, as the API says it (one vocabulary, DESIGN.md §9)."""
    return ApiError(_FROM_RESULT[error.code], error.message, error.field)


def check_protocol(value: str | None) -> None:
    """Every request names the protocol it speaks; a missing or other version is refused."""
    if value is None:
        raise ApiError(
            ApiCode.PROTOCOL_VERSION,
            f"send the header {PROTOCOL_HEADER}: {PROTOCOL_VERSION}",
            PROTOCOL_HEADER,
        )
    if value.strip() != PROTOCOL_VERSION:
        raise ApiError(
            ApiCode.PROTOCOL_VERSION,
            f"this server speaks {PROTOCOL_HEADER} {PROTOCOL_VERSION}, not {value[:16]!r}",
            PROTOCOL_HEADER,
        )


@dataclass(frozen=True, slots=True)
class _Entry:
    digest: bytes
    principal: Principal


class TokenDirectory:
    """Bearer tokens → principals, from ``[principals.NAME]`` (only digests are held)."""

    def __init__(self, entries: Mapping[bytes, Principal]) -> None:
        self._entries = tuple(_Entry(digest, principal) for digest, principal in entries.items())

    @classmethod
    def from_config(cls, principals: Mapping[str, PrincipalConfig]) -> TokenDirectory:
        entries: dict[bytes, Principal] = {}
        for name, conf in sorted(principals.items()):
            digest = bytes.fromhex(conf.token_sha256.get_secret_value())
            entries[digest] = Principal(
                name=name,
                role=conf.role,
                tenant_id=conf.tenant_id,
                user_id=conf.user_id,
                session_id=conf.session_id,
            )
        return cls(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def principal(self, name: str) -> Principal | None:
        """The configured principal called ``name`` (the MCP server acts as one)."""
        return next((e.principal for e in self._entries if e.principal.name == name), None)

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal whose token the ``Authorization`` header bears; 401 otherwise."""
        token = _bearer(authorization)
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: Principal | None = None
        for entry in self._entries:  # every entry, always: no early exit
            if hmac.compare_digest(entry.digest, digest):
                found = entry.principal
        if found is None:
            raise ApiError(ApiCode.UNAUTHENTICATED, "unknown bearer token", "Authorization")
        return found


def _bearer(authorization: str | None) -> str:
    if authorization is None or not authorization.strip():
        raise ApiError(
            ApiCode.UNAUTHENTICATED, "send Authorization: Bearer <token>", "Authorization"
        )
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != _SCHEME or not token:
        raise ApiError(
            ApiCode.UNAUTHENTICATED, "the Authorization scheme must be Bearer", "Authorization"
        )
    return token
