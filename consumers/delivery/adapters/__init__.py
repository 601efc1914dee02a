"""Delivery adapters: where an outbox entry goes once the delivery consumer has claimed it.

Public surface (everything else is internal to the submodules):

- :class:`SendResult` — what an adapter answers for an outbox entry, categorical
  only (an ``ErrorCode``, a ``Retry-After``, ``repeat_risk``, Kafka records to write);
- :class:`Adapter` — the protocol (``kind``, ``send(entry)``, ``close()``): synchronous and
  thread-safe, called from the consumer's thread pool between its two transactions;
- :func:`webhook_body` — the canonical JSON body of DESIGN.md §9;
- :func:`build_adapters` → :class:`AdapterRegistry` — adapters from ``vigil.toml``, resolved by
  target; an unknown target fails closed with ``rejected``.

Adapters: ``webhook`` (signed, ``signing``), ``in_app`` (a ledger record written in the
consumer's transaction), ``log``, ``chat`` (Telegram-shaped), ``console``; shared HTTP in
``http``. Left out: retries, budgets, authorization and state (the delivery consumer and
``pipeline.rules.dispatch``).
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
