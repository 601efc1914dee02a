"""What every long-running ``vigil`` process shares at start-up: the operator's default budget
caps and the ``/metrics`` server. Leaves out each process's own loop and topics."""

from __future__ import annotations

from prometheus_client import start_http_server

from pipeline.config import BudgetDefaults
from pipeline.rules.budgets import BudgetCaps

__all__ = ["default_caps", "serve_metrics"]


def default_caps(defaults: BudgetDefaults) -> BudgetCaps:
    """The operator's budget caps for watchers that leave some out."""
    return BudgetCaps(
        window=defaults.window,
        evaluations=defaults.evaluations,
        deliveries=defaults.deliveries,
        attempts=defaults.attempts,
        tokens=defaults.tokens,
        micro_usd=defaults.micro_usd,
    )


def serve_metrics(listen: str) -> int:
    """Serve ``/metrics`` on ``host:port`` (port 0 picks one); returns the bound port."""
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host.strip("[]") or "0.0.0.0")
    return int(server.server_port)
