"""The console's pages under ``/ui/`` (DESIGN.md §9), one router module each: ``watches``,
``watch`` (a watcher, approve and reject), ``proposals``, ``schedules``, ``deliveries`` and
``sign_in`` (in and out). Owns :func:`install_console`, which mounts them with the home
redirect and the stylesheet. Left out: what every page shares (``console.core``), sessions
(``console.sessions``) and the API routes (``pipeline.control.http``).
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.responses import RedirectResponse, Response

from pipeline.control.http.common import ApiServices, StatusPort
from pipeline.control.http.console.core import MAX_FORM, PAGE_SIZE, Console
from pipeline.control.http.console.pages import (
    deliveries,
    proposals,
    schedules,
    sign_in,
    watch,
    watches,
)
from pipeline.control.http.console.sessions import secure_headers

__all__ = ["MAX_FORM", "PAGE_SIZE", "Console", "install_console"]


def install_console(
    app: FastAPI, services: ApiServices, *, status: StatusPort | None = None
) -> Console:
    """Mount the console on ``app`` under ``/ui/``."""
    console = Console(services, status=status)
    app.include_router(_base(console))
    for page in (sign_in, watches, watch, proposals, schedules, deliveries):
        app.include_router(page.router(console))
    return console


def _base(console: Console) -> APIRouter:
    router = APIRouter(include_in_schema=False)

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

    return router
