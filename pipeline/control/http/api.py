"""The HTTP API: a thin FastAPI adapter over the control plane (DESIGN.md §9, seed 003).

Owns :func:`create_app`: the edge guard (``guard``: authentication before any body is read, the
caller's request rate, a 1 MiB body bound), the routes of DESIGN.md §9's table (``watches``,
``ledger``, ``grants``, ``deliveries``) and the wake stream (``wakes``), the console under
``/ui/`` (``console``: server-rendered, cookie sessions, CSRF, strict CSP), the probes
(``/healthz``; ``/readyz``: the broker answers and the topics exist — one shared client, its
answer cached for seconds), the served OpenAPI document, and one error shape for every refusal —
``{"error": {"code", "message", "field"}}`` — whether a route refused, a parameter failed
validation (422 ``invalid``; the protocol header's failure is 400 ``protocol_version``) or no
route matched (404 ``not_found``). Every ``/v1`` request names ``Vigil-Protocol-Version: 1`` and
bears a configured principal's token; the routes assert that principal on commands and the
command processor decides, so HTTP, MCP, the socket and the CLI govern alike.

Watch routes act on the caller's own subject; a manager names another user of its tenant with
``?user_id=``, an operator any subject with ``?tenant_id=&user_id=``.

Left out: authentication and the error vocabulary (``auth``), the shared caller and round
trip (``common``), bodies (``models``), Kafka (``backend``), serving and wiring
from ``vigil.toml`` (``pipeline.cli.api_cmd``).
"""

from typing import Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from pipeline.control.http import deliveries as http_deliveries
from pipeline.control.http import events as http_events
from pipeline.control.http import grants as http_grants
from pipeline.control.http import ledger as http_ledger
from pipeline.control.http import wakes as http_wakes
from pipeline.control.http import watches as http_watches
from pipeline.control.http.auth import PROTOCOL_HEADER, ApiCode, ApiError, check_protocol
from pipeline.control.http.common import (
    ApiServices,
    LedgerPort,
    SchedulePort,
    Services,
)
from pipeline.control.http.console import install_console
from pipeline.control.http.guard import EdgeGuard
from pipeline.control.http.models import ErrorBody, Health

__all__ = ["API_VERSION", "ApiServices", "LedgerPort", "SchedulePort", "create_app"]

API_VERSION: Final = "1"


def create_app(services: ApiServices) -> FastAPI:
    """The API over ``services``; its OpenAPI document never depends on them."""
    app = FastAPI(
        title="vigil",
        version=API_VERSION,
        description="Governed watchers, agent watches and schedules. Every /v1 request sends "
        f"`Authorization: Bearer <token>` and `{PROTOCOL_HEADER}: 1`.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.services = services
    app.add_middleware(
        EdgeGuard, tokens=services.tokens, max_body=services.max_body, limiter=services.limiter
    )
    _install_error_handlers(app)
    modules = (http_watches, http_ledger, http_wakes, http_grants, http_events, http_deliveries)
    for module in modules:
        app.include_router(module.router)
    install_console(app, services, status=services.status)

    @app.get("/healthz", response_model=Health, summary="Liveness")
    def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Health,
        responses={503: {"model": ErrorBody}},
        summary="Readiness: the broker answers and the topics exist (cached for seconds)",
    )
    def readyz(services: Services) -> JSONResponse:
        problem = services.ledger.ready()
        if problem is not None:
            return JSONResponse(ApiError(ApiCode.UNAVAILABLE, problem).body(), status_code=503)
        return JSONResponse(Health(status="ready").model_dump(mode="json"))

    return app


def _install_error_handlers(app: FastAPI) -> None:
    def refused(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers() or None)

    def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        for error in errors:
            if [str(part) for part in error.get("loc", ())][:2] == ["header", PROTOCOL_HEADER]:
                try:
                    check_protocol(request.headers.get(PROTOCOL_HEADER))
                except ApiError as wrong:
                    return refused(request, wrong)
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        loc = [str(part) for part in first.get("loc", ())]
        field = ".".join(loc[1:] if loc and loc[0] in ("body", "query", "path") else loc)
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        return refused(request, ApiError(ApiCode.INVALID, message, field or None))

    def http_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: ApiCode.NOT_FOUND, 413: ApiCode.TOO_LARGE}.get(
            exc.status_code, ApiCode.INVALID
        )
        body = ApiError(code, str(exc.detail)).body()
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    app.add_exception_handler(ApiError, refused)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
