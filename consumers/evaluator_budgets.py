"""Evaluation budgets for a whole batch in one Redis round trip.

Owns :class:`EvaluationBudgets`: the charges a batch of evaluations needs, pipelined to Redis
(``charge_many``: one EVALSHA per charge, one round trip per batch) with the very script, key
layout and idempotency tokens of :class:`pipeline.redis.budgets.RedisBudgets`, whose single
``charge`` serves the rare re-evaluation of a watcher whose budget ran out mid-batch. A token
charges once per window whichever path sends it. Redis failures become ``BudgetStoreError``.

Leaves out the rules (``pipeline.budgets``) and the key layout (``pipeline.redis.budgets``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib.resources import files

import redis

from pipeline.budgets import BudgetCaps, BudgetScope, BudgetVerdict, Dimension, window_end
from pipeline.errors import BudgetStoreError
from pipeline.instants import utc
from pipeline.redis.budgets import DEFAULT_KEY_PREFIX, EXPIRY_GRACE, RedisBudgets

__all__ = ["Charge", "EvaluationBudgets"]

_MS = timedelta(milliseconds=1)
_SCRIPT = files("pipeline.redis").joinpath("budget_charge.lua").read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class Charge:
    """One evaluation's charge: whose window, its caps, the amounts and the idempotency token."""

    scope: BudgetScope
    caps: BudgetCaps
    increment: Mapping[Dimension, int]
    token: str


class EvaluationBudgets:
    """Per-watcher evaluation budgets; no network until the first charge."""

    def __init__(self, client: redis.Redis, *, key_prefix: str = DEFAULT_KEY_PREFIX) -> None:
        self._client = client
        self.store = RedisBudgets(client, key_prefix=key_prefix)
        self._script = client.register_script(_SCRIPT)

    def charge(self, charge: Charge, now: datetime) -> BudgetVerdict:
        """One charge, on its own round trip."""
        found = self.store.charge(charge.scope, charge.caps, charge.increment, charge.token, now)
        return found.verdict

    def charge_many(self, charges: Sequence[Charge], now: datetime) -> list[BudgetVerdict]:
        """Every charge in order, pipelined: one round trip for the batch.

        Amounts are the evaluator's own (one evaluation, and a tick's validated usage), so the
        per-charge validation of ``RedisBudgets.charge`` is skipped; caps and keys are built
        once per distinct caps and scope of the batch.
        """
        if not charges:
            return []
        now = utc(now)
        pipe = self._client.pipeline(transaction=False)
        caps_args: dict[int, tuple[int, list[tuple[str, int]]]] = {}
        keys: dict[tuple[BudgetScope, timedelta], str] = {}
        for charge in charges:
            caps = charge.caps
            found = caps_args.get(id(caps))
            if found is None:
                lives = (window_end(now, caps.window) + EXPIRY_GRACE - now) // _MS
                caps_list = [(d.value, -1 if (c := caps.cap(d)) is None else c) for d in Dimension]
                found = caps_args[id(caps)] = (lives, caps_list)
            lives, caps_list = found
            args: list[str | int] = [charge.token, lives]
            increment = charge.increment
            for dimension, (name, cap) in zip(Dimension, caps_list, strict=True):
                amount = increment.get(dimension, 0)
                if amount < 0:
                    raise BudgetStoreError(f"a negative {name} charge: {amount}")
                args += [name, cap, amount]
            where = (charge.scope, caps.window)
            key = keys.get(where)
            if key is None:
                key = keys[where] = self.store.window_key(charge.scope, caps, now)
            self._script(keys=[key], args=args, client=pipe)
        try:
            replies = pipe.execute()
        except redis.RedisError as exc:
            raise BudgetStoreError(f"budget store failed to charge: {type(exc).__name__}") from exc
        return [BudgetVerdict(_text(reply[0])) for reply in replies]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
