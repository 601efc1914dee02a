"""The console's status header, gathered: processes ready, their consumer lag, and the budgets the
signed-in subject used this window (DESIGN.md §9 ``/ui/``).

Owns :class:`StatusReader`: the four consumer groups (a member means ready), their read-committed
lag and the subject's budget usage (its window index, never a keyspace scan), cached
:data:`CACHE_S`; a server that does not answer shows as ``?``, never an error page. Left out:
rendering (``pipeline.control.http.console``)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Final

from pipeline.clock import Clock
from pipeline.kafka.admin import connect_admin
from pipeline.kafka.groups import group_status
from pipeline.kafka.topics import Topology
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.authz import Principal
from pipeline.rules.budgets import Dimension
from pipeline.rules.errors import VigilError

__all__ = ["CACHE_S", "GROUPS", "StatusReader"]

log = logging.getLogger(__name__)

CACHE_S: Final = 5.0
GROUPS: Final = ("command-processor", "evaluator", "ticker", "delivery")
_SHOWN: Final = (Dimension.EVALUATIONS, Dimension.DELIVERIES, Dimension.ATTEMPTS)


class StatusReader:
    """The header's figures; no network until first asked."""

    def __init__(
        self,
        bootstrap: str,
        topology: Topology,
        clock: Clock,
        budgets: RedisBudgets | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._groups = [f"{topology.prefix}{name}" for name in GROUPS]
        self._clock = clock
        self._budgets = budgets
        self._admin: Any = None
        self._lock = threading.Lock()
        self._cached: dict[object, tuple[float, Any]] = {}

    def _fresh(self, key: object, read: Any) -> Any:
        with self._lock:
            found = self._cached.get(key)
            if found is not None and time.monotonic() - found[0] < CACHE_S:
                return found[1]
        value = read()
        with self._lock:
            if len(self._cached) > 10_000:
                self._cached.clear()
            self._cached[key] = (time.monotonic(), value)
        return value

    def _processes(self) -> tuple[str, str]:
        try:
            if self._admin is None:
                self._admin = connect_admin(self._bootstrap)
            found = group_status(self._admin, self._groups)
        except (VigilError, ValueError) as exc:
            log.warning("status header: consumer groups unreadable: %s", exc)
            return "?", "?"
        ready = sum(1 for g in found if g.members > 0)
        return f"{ready}/{len(found)}", str(sum(g.lag for g in found))

    def _usage(self, tenant_id: str, user_id: str) -> str:
        if self._budgets is None:
            return "?"
        try:
            used = self._budgets.subject_usage(tenant_id, user_id, self._clock.now())
        except VigilError as exc:
            log.warning("status header: budgets unreadable: %s", exc)
            return "?"
        return " · ".join(f"{d.value} {used[d]}" for d in _SHOWN)

    def header(self, principal: Principal) -> dict[str, Any] | None:
        ready, lag = self._fresh("groups", self._processes)
        subject = (principal.tenant_id, principal.user_id)
        budgets = self._fresh(subject, lambda: self._usage(*subject))
        return {"ready": ready, "lag": lag, "budgets": budgets}
