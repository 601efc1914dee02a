"""The evaluator process's heap: what the cyclic garbage collector walks, and how often.

Owns :func:`settle_heap` and :data:`GC_THRESHOLDS`. Leaves out what the views hold (``loop``).
"""

from __future__ import annotations

import gc

__all__ = ["GC_THRESHOLDS", "settle_heap"]

GC_THRESHOLDS = (50_000, 20, 20)  # the evaluator process's cyclic collector (see settle_heap)


def settle_heap() -> None:
    """Take what the process holds now (restored tables, indexes, decoded definitions) out of
    the cyclic garbage collector's full passes (``gc.freeze``).

    These views live as long as the assignment, yet each full collection walked all of them
    again: with 10,000 watchers that was a tenth of the evaluator's CPU. Objects made later
    are collected as usual; frozen ones are still freed by reference counting when dropped,
    but a frozen cycle never is: so the views an earlier assignment froze are unfrozen and
    collected first (one full collection per rebuild, not per batch), or every rebalance would
    leak the tables and indexes it replaced.

    The collector's thresholds are raised too (:data:`GC_THRESHOLDS`): each event allocates
    containers that reference counting frees or the per-watcher caches keep, and at Python's
    default (700, 10, 10) that set off ~33 young passes per 1,000 events and a full pass every
    ~3,000, which walked everything made since the freeze and found no garbage (the cost,
    before and after: ``benchmarks/README.md``, "The cyclic garbage collector").
    """
    gc.set_threshold(*GC_THRESHOLDS)
    gc.unfreeze()
    gc.collect()
    gc.freeze()
