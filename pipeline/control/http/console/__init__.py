"""The web console under ``/ui/`` of ``vigil api`` (DESIGN.md §9): server-rendered pages with no
JavaScript, over the API's own ports.

Modules: ``pages`` (one router module per page), ``core`` (:class:`Console`), ``schedules``,
``sessions`` (cookie, CSRF, Content-Security-Policy) and ``render``; the status header's port is
``common.StatusPort``. This module says what is public."""

from pipeline.control.http.console.pages import Console, install_console
from pipeline.control.http.console.sessions import CSP, SessionStore

__all__ = ["CSP", "Console", "SessionStore", "install_console"]
