"""The HTTP API: a thin FastAPI adapter over the control plane (DESIGN.md §9, seed 003).

Owns :func:`create_app`: the edge guard, DESIGN.md §9's routes and the wake stream, the console
(``/ui/``), the probes, the OpenAPI document and one error shape for every refusal (``{"error":
{"code", "message", "field"}}``). Routes assert the caller on commands, the processor decides; a
manager or operator names another subject with ``?user_id=`` (``?tenant_id=``). Left out: ``auth``,
``common``, ``models``, ``backend`` and wiring (``pipeline.cli.api_cmd``)."""

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
