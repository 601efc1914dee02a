"""The web console under ``/ui/`` of ``vigil api`` (DESIGN.md §9): server-rendered pages with
no JavaScript, over the API's own ports.

``pages`` (one router module per page: watches, a watcher, proposals, schedules, deliveries;
sign in and out), ``core`` (what every page shares: :class:`Console`), ``schedules`` (what the
schedules page lists and cancels), ``sessions``
(the session cookie, CSRF tokens, the Content-Security-Policy), ``render`` (the templates and
definitions in plain words); the status header's port is ``common.StatusPort``. This module says
what is public.
"""

from pipeline.control.http.console.pages import Console, install_console
from pipeline.control.http.console.sessions import CSP, SessionStore

__all__ = ["CSP", "Console", "SessionStore", "install_console"]
