"""What every HTTP route shares: the services behind the API, the caller, one command round trip.

Owns :class:`ApiServices` (the ports the routes use), the :data:`Caller` dependency (the principal
the edge guard authenticated), :func:`run_command` (a command asserted by the caller; a refusal
becomes the API error of the same code), :func:`subject_of` (the caller's own subject unless it
names another; the processor decides) and the shared parameter types and error responses. Left out:
the routes and the app (``api``)."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Final, Literal, Protocol

from fastapi import Depends, Header, Query, Request
from fastapi.security import HTTPBearer
from pydantic import ValidationError

from pipeline.clock import Clock, SystemClock
from pipeline.control.core import CommandPort
from pipeline.control.http.auth import (
    PROTOCOL_HEADER,
    ApiCode,
    ApiError,
    TokenDirectory,
    from_command_error,
)
from pipeline.control.http.guard import DEFAULT_MAX_BODY, PRINCIPAL
from pipeline.control.http.limits import RateLimiter
from pipeline.control.http.models import REF_PATTERN, ErrorBody
from pipeline.control.http.pool import PoolBusyError
from pipeline.control.http.wake_reader import StreamSlots, WakesPort
from pipeline.control.verbs import VerbResponse
from pipeline.records.event import EventLine
from pipeline.rules.authz import Principal
from pipeline.rules.commands.model import CommandVerb
from pipeline.rules.errors import BrokerError, DefinitionError, SerdeError

__all__ = [
    "MAX_LONG",
    "ApiServices",
    "Caller",
    "EventsPort",
    "LedgerPort",
    "SchedulePort",
    "Services",
    "StatusPort",
    "TenantQ",
    "UserQ",
    "documented",
    "guarded",
    "invalid",
    "run_command",
    "subject_of",
]

MAX_LONG: Final = 2**63 - 1
"""Integers that travel in a command record are Avro longs."""


class LedgerPort(Protocol):
    """What the routes need of :class:`~pipeline.control.http.backend.LedgerStore`."""

    def evaluations(
        self, tenant_id: str, user_id: str, watcher_id: str, source_id: str, limit: int
    ) -> tuple[list[dict[str, Any]], int]: ...

    def latest(
        self, tenant_id: str, user_id: str, source_ids: Iterable[str] | None = None
    ) -> dict[str, dict[str, Any]]: ...

    def lifecycle(self, tenant_id: str, user_id: str, watcher_id: str) -> list[dict[str, Any]]: ...

    def notifications(self, tenant_id: str, user_id: str) -> tuple[list[dict[str, Any]], int]: ...

    def ack(self, tenant_id: str, user_id: str, delivery_key: str) -> dict[str, Any] | None: ...

    def deliveries(
        self, tenant_id: str, user_id: str, state: str | None, watcher_id: str | None
    ) -> list[dict[str, Any]]: ...

    def delivery(
        self, tenant_id: str, user_id: str, delivery_key: str
    ) -> dict[str, Any] | None: ...

    def ready(self) -> str | None: ...


class SchedulePort(Protocol):
    """The dispatch core's seam: a raw verb body for a principal → a verb response."""

    def handle(self, body: object, principal: Principal) -> VerbResponse: ...


class EventsPort(Protocol):
    """The publisher SDK's seam (``producers.publish``, wired by ``vigil api``): each event
    checked and placed as the SDK does, carrying ``tenant_id`` (the publisher principal's), the
    batch flushed; per event ``None`` (accepted) or why it was refused. A broker that does not
    acknowledge raises :class:`BrokerError`."""

    def publish(
        self, events: Sequence[tuple[EventLine, datetime]], tenant_id: str
    ) -> list[str | None]: ...


class StatusPort(Protocol):
    """The console's status header: processes ready, consumer lag, budgets used in this window
    (:class:`~pipeline.control.status.StatusReader`); None when nothing is known."""

    def header(self, principal: Principal) -> dict[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class ApiServices:
    tokens: TokenDirectory
    commands: CommandPort
    ledger: LedgerPort
    schedules: Callable[[Principal], SchedulePort]
    max_body: int = DEFAULT_MAX_BODY
    events: EventsPort | None = None  # None: this API takes no events
    publishers: Mapping[str, frozenset[str]] = field(default_factory=dict)  # name → source ids
    status: StatusPort | None = None  # the console's header (None: not shown)
    chats: tuple[str, ...] = ()  # the configured chats, whose schedules the console shows
    clock: Clock = field(default_factory=SystemClock)  # the console's "now" (next polls)
    limiter: RateLimiter | None = None  # requests per principal, /v1 and /ui (None: unlimited)
    sign_ins: RateLimiter | None = None  # console sign-in attempts per client address
    sessions_per_principal: int = 20  # console sessions one principal keeps
    secure_cookie: str = "auto"  # [api] secure_cookie
    wakes: WakesPort | None = None  # GET /v1/ledger/wakes (None: not served)
    wake_slots: StreamSlots = field(default_factory=StreamSlots)  # its open streams, bounded


def _services(request: Request) -> ApiServices:
    services = request.app.state.services
    assert isinstance(services, ApiServices)
    return services


Services = Annotated[ApiServices, Depends(_services)]

_bearer = HTTPBearer(auto_error=False, description="A configured principal's token.")


def _caller(
    request: Request,
    services: Services,
    _version: Annotated[
        Literal["1"], Header(alias=PROTOCOL_HEADER, description="The protocol spoken: 1.")
    ],
    _credentials: Annotated[object, Depends(_bearer)],
) -> Principal:
    # The edge guard authenticated the caller before the body was read; these parameters
    # document the headers (a missing or other version fails their validation: 400).
    found = getattr(request.state, PRINCIPAL, None)
    if isinstance(found, Principal):
        return found
    return services.tokens.authenticate(request.headers.get("authorization"))


Caller = Annotated[Principal, Depends(_caller)]

TenantQ = Annotated[
    str | None, Query(pattern=REF_PATTERN, description="Operators: the subject's tenant.")
]
UserQ = Annotated[
    str | None,
    Query(pattern=REF_PATTERN, description="Managers and operators: the subject's user."),
]


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error responses of a ``/v1`` route: always 400, 401, 413, 422, 429, 503, plus
    ``statuses``."""
    always = (400, 401, 413, 422, 429, 503)
    return {status: {"model": ErrorBody} for status in (*always, *statuses)}


def subject_of(who: Principal, tenant_id: str | None, user_id: str | None) -> tuple[str, str]:
    return tenant_id or who.tenant_id, user_id or who.user_id


def run_command(
    services: ApiServices,
    verb: CommandVerb,
    who: Principal,
    tenant_id: str,
    user_id: str,
    **fields: Any,
) -> dict[str, Any]:
    """One command round trip; a refusal becomes its API error."""
    try:
        command = services.commands.command(verb, who, tenant_id, user_id, **fields)
        result = services.commands.send(command)
    except DefinitionError as exc:
        raise ApiError(ApiCode.INVALID, exc.message, exc.field) from None
    except ValidationError as exc:
        raise invalid(exc) from None
    except SerdeError as exc:  # a value no command record can carry
        raise ApiError(ApiCode.INVALID, str(exc)) from None
    except PoolBusyError as exc:  # every command client busy: come back shortly
        raise ApiError(ApiCode.UNAVAILABLE, str(exc), retry_after=exc.wait_s) from None
    except BrokerError as exc:
        raise ApiError(ApiCode.UNAVAILABLE, str(exc)) from None
    if result.error is not None:
        raise from_command_error(result.error)
    return dict(result.result or {})


def guarded(read: Callable[[], Any]) -> Any:
    """A Kafka read; an unreachable broker is 503 ``unavailable``."""
    try:
        return read()
    except BrokerError as exc:
        raise ApiError(ApiCode.UNAVAILABLE, str(exc)) from None


def invalid(exc: ValidationError) -> ApiError:
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"]) or None
    return ApiError(ApiCode.INVALID, str(error["msg"]).removeprefix("Value error, "), field)
