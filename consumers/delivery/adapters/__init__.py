"""Delivery adapters: where an outbox entry goes once the delivery consumer has claimed it.

Public surface: :class:`SendResult`, the :class:`Adapter` protocol, :func:`webhook_body` and
:func:`build_adapters` → :class:`AdapterRegistry`; adapters ``webhook``, ``in_app``, ``log``,
``chat``, ``console``. Leaves out retries, budgets, authorization and state (the delivery
consumer and ``pipeline.rules.dispatch``).
"""

from consumers.delivery.adapters.base import (
    Adapter,
    AdapterKind,
    OutboundRecord,
    SendResult,
    webhook_body,
)
from consumers.delivery.adapters.registry import AdapterRegistry, build_adapters

__all__ = [
    "Adapter",
    "AdapterKind",
    "AdapterRegistry",
    "OutboundRecord",
    "SendResult",
    "build_adapters",
    "webhook_body",
]
