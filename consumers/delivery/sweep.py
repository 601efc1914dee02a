"""Cancel and erase reach delivery (DESIGN.md §10): what a new ``lifecycle`` record drops.

Owns :func:`sweep`: queued ``pending`` entries of a cancelled watcher or an erased subject become
``cancelled`` and are purged; an erasure also purges the subject's settled entries and its
Redis budget keys; entries in flight are left to their answer. Leaves out reading
``lifecycle`` (``LifecycleIndex``) and writing tombstones (``loop``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from consumers.delivery.due import DueKind
from consumers.delivery.metrics import DeliveryMetrics
from consumers.delivery.states import DeliveryStates
from pipeline.records.delivery_state import DeliveryRecord
from pipeline.records.lifecycle import LifecycleRecord
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.dispatch import cancel
from pipeline.rules.errors import BudgetStoreError
from pipeline.rules.outcomes import DeliveryStatus
from pipeline.runtime.tables import Table

__all__ = ["sweep"]

log = logging.getLogger(__name__)


def sweep(
    dropping: list[LifecycleRecord],
    states: DeliveryStates,
    budgets: RedisBudgets,
    metrics: DeliveryMetrics,
    now: datetime,
) -> None:
    """Apply ``dropping`` to every held entry of their subjects (in the open transaction)."""
    subjects = {(r.tenant_id, r.user_id) for r in dropping}
    for partition, store in list(states.stores()):
        for key, raw in list(store.items()):
            record = states.record(key, raw)
            if record is None or (record.tenant_id, record.user_id) not in subjects:
                continue
            _sweep_one(record, partition, store, dropping, states, metrics, now)
    for lifecycle in dropping:
        if lifecycle.erasure:
            try:
                budgets.erase_subject(lifecycle.tenant_id, lifecycle.user_id)
            except BudgetStoreError as exc:
                log.error("could not erase the budgets of an erased subject: %s", exc)


def _sweep_one(
    record: DeliveryRecord,
    partition: int,
    store: Table,
    dropping: Iterable[LifecycleRecord],
    states: DeliveryStates,
    metrics: DeliveryMetrics,
    now: datetime,
) -> None:
    entry = states.entry(record.key, partition)
    created = entry.created_at if entry is not None else record.state.created_at
    reason = next((r for r in dropping if r.drops(record, created)), None)
    if reason is None:
        return
    status = record.state.status
    if status is DeliveryStatus.PENDING:
        states.write(store, record.moved(cancel(record.state, now)))
        metrics.cancellations.inc()
        states.queue.schedule(record.key, partition, DueKind.PURGE, now)
    elif status is not DeliveryStatus.DISPATCHING and reason.erasure:
        states.queue.schedule(record.key, partition, DueKind.PURGE, now)
