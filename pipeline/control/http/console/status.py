"""The console's status header: processes ready, consumer lag, budgets used in this window.

Owns :class:`StatusPort`, what the pages ask for the header (a small mapping, or None when
nothing is known), so the pages never read Kafka or Redis themselves. Left out: gathering the
figures (``pipeline.cli.api_cmd`` wires the implementation).
"""

from __future__ import annotations

from typing import Any, Protocol

from pipeline.rules.authz import Principal

__all__ = ["StatusPort"]


class StatusPort(Protocol):
    def header(self, principal: Principal) -> dict[str, Any] | None: ...
