"""Budget charges for many due deliveries in one Redis round trip.

Owns :class:`BatchBudgets`, :class:`~pipeline.redis.budgets.RedisBudgets` plus
:meth:`~BatchBudgets.charge_many`: the same Lua script, key layout and idempotency tokens,
sent through one non-transactional pipeline. Delivery decides hundreds of due entries per
transaction, and one round trip each (with the GIL shared by the sender threads) cost more
than the sends themselves. Only the dimensions a charge increments travel and are checked:
a delivery spends deliveries and attempts, and an exhausted evaluation budget must not stop it
(``remaining`` of a batch verdict covers those dimensions only). Each charge stays atomic and
idempotent on its own; they need not be atomic together. A Redis failure fails the whole batch
with ``BudgetStoreError`` (every entry in it is deferred, never sent unbudgeted).

Leaves out the rules (``pipeline.rules.budgets``) and what a verdict means (``pipeline.rules.dispatch``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType

import redis

from pipeline.redis.budgets import EXPIRY_GRACE, RedisBudgets
from pipeline.rules.budgets import (
    MAX_AMOUNT,
    BudgetCaps,
    BudgetCheck,
    BudgetScope,
    BudgetVerdict,
    Dimension,
    window_end,
)
from pipeline.rules.errors import BudgetStoreError, DefinitionError
from pipeline.rules.instants import utc

__all__ = ["BatchBudgets", "Charge"]


@dataclass(frozen=True, slots=True)
class Charge:
    """One charge of a batch: the arguments of :meth:`RedisBudgets.charge`."""

    scope: BudgetScope
    caps: BudgetCaps
    increment: Mapping[Dimension, int]
    token: str
    now: datetime


class BatchBudgets(RedisBudgets):
    """Budget counters that can also charge many scopes in one round trip."""

    def charge_many(self, charges: Sequence[Charge]) -> list[BudgetCheck]:
        """Each charge as :meth:`charge` would make it, in order, in one pipeline."""
        if not charges:
            return []
        pipe = self._client.pipeline(transaction=False)
        for item in charges:
            _validate(item.increment)  # before Redis sees them
            now = utc(item.now)
            lives = window_end(now, item.caps.window) + EXPIRY_GRACE - now
            args: list[str | int] = [item.token, lives // timedelta(milliseconds=1)]
            for dimension in item.increment:
                cap = item.caps.cap(dimension)
                args += [dimension.value, -1 if cap is None else cap, item.increment[dimension]]
            self._charge(keys=[self.window_key(item.scope, item.caps, now)], args=args, client=pipe)
        try:
            replies = pipe.execute()
        except redis.RedisError as exc:  # no URL in the message: it may hold a password
            raise BudgetStoreError(f"budget store failed to charge: {type(exc).__name__}") from exc
        return [_check(item, reply) for item, reply in zip(charges, replies, strict=True)]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _validate(increment: Mapping[Dimension, int]) -> None:
    for dimension, amount in increment.items():
        if isinstance(amount, bool) or not isinstance(amount, int) or not 0 <= amount <= MAX_AMOUNT:
            raise DefinitionError(f"must be an integer in 0..{MAX_AMOUNT}", dimension.value)


def _check(charge: Charge, reply: Sequence[bytes | str]) -> BudgetCheck:
    """The verdict; ``remaining`` covers the charged dimensions only (what is left of each)."""
    verdict, exhausted, *used = (_text(part) for part in reply)
    remaining: dict[Dimension, int | None] = {}
    for dimension, spent in zip(charge.increment, used, strict=True):
        cap = charge.caps.cap(dimension)
        remaining[dimension] = None if cap is None else max(0, cap - int(spent))
    return BudgetCheck(
        BudgetVerdict(verdict),
        Dimension(exhausted) if exhausted else None,
        MappingProxyType(remaining),
    )
