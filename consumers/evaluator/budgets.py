"""Evaluation budgets for a whole batch in one Redis round trip and one script call.

Owns :class:`EvaluationBudgets`: the charges a batch of evaluations needs, sent to Redis as one
``EVALSHA`` of a batch script (``charge_many``) that runs the very script of
:class:`pipeline.redis.budgets.RedisBudgets` (``budget_charge.lua``, embedded verbatim as a Lua
function) once per charge, with the same key layout and idempotency tokens; its single
``charge`` serves the rare re-evaluation of a watcher whose budget ran out mid-batch. A token
charges once per window whichever path sends it. Redis failures become ``BudgetStoreError``.

Why one script call: a pipeline of one ``EVALSHA`` per charge cost about 80 µs of client CPU
per charge (redis-py packs a dozen arguments and parses a five-element reply for each); the
batch sends one JSON argument and reads one comma-separated reply.

Leaves out the rules (``pipeline.rules.budgets``) and the key layout (``pipeline.redis.budgets``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib.resources import files

import redis

from pipeline.redis.budgets import DEFAULT_KEY_PREFIX, EXPIRY_GRACE, RedisBudgets
from pipeline.rules.budgets import (
    BudgetCaps,
    BudgetScope,
    BudgetVerdict,
    Dimension,
    window_end,
    window_start,
)
from pipeline.rules.errors import BudgetStoreError
from pipeline.rules.instants import utc

__all__ = ["Charge", "EvaluationBudgets"]

_MS = timedelta(milliseconds=1)
_SCRIPT = files("pipeline.redis").joinpath("budget_charge.lua").read_text(encoding="utf-8")
# The single-charge script as a function of its own KEYS and ARGV, called once per charge.
# Every argument travels as a string, as ARGV does (amounts must stay exact decimal text).
_BATCH_SCRIPT = f"""
local function charge_one(KEYS, ARGV)
{_SCRIPT}
end

local specs = cjson.decode(ARGV[1])
local verdicts = {{}}
for i = 1, #KEYS do
  verdicts[i] = charge_one({{KEYS[i]}}, specs[i])[1]
end
return table.concat(verdicts, ",")
"""
_VERDICTS = {verdict.value: verdict for verdict in BudgetVerdict}


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
        self._batch = client.register_script(_BATCH_SCRIPT)
        # Window keys by window length: the window's start, and each scope's key in it. A new
        # window replaces its whole map, so keys of gone watchers do not pile up.
        self._keys: dict[timedelta, tuple[datetime, dict[BudgetScope, str]]] = {}

    def charge(self, charge: Charge, now: datetime) -> BudgetVerdict:
        """One charge, on its own round trip."""
        found = self.store.charge(charge.scope, charge.caps, charge.increment, charge.token, now)
        return found.verdict

    def charge_many(self, charges: Sequence[Charge], now: datetime) -> list[BudgetVerdict]:
        """Every charge in order, in one script call: one round trip for the batch.

        Amounts are the evaluator's own (one evaluation, and a tick's validated usage), so the
        per-charge validation of ``RedisBudgets.charge`` is reduced to refusing a negative one;
        caps are prepared once per distinct caps of the batch, and window keys once per scope
        and window.
        """
        if not charges:
            return []
        now = utc(now)
        prepared: dict[int, tuple[dict[BudgetScope, str], str, list[tuple[Dimension, str, str]]]]
        prepared = {}
        keys: list[str] = []
        specs: list[list[str]] = []
        for charge in charges:
            caps = charge.caps
            found = prepared.get(id(caps))
            if found is None:
                lives = (window_end(now, caps.window) + EXPIRY_GRACE - now) // _MS
                caps_text = [
                    (d, d.value, "-1" if (c := caps.cap(d)) is None else str(c)) for d in Dimension
                ]
                found = prepared[id(caps)] = (self._window_keys(caps, now), str(lives), caps_text)
            window_keys, lives_text, caps_text = found
            spec = [charge.token, lives_text]
            increment = charge.increment
            for dimension, name, cap in caps_text:
                amount = increment.get(dimension, 0)
                if amount < 0:
                    raise BudgetStoreError(f"a negative {name} charge: {amount}")
                spec += (name, cap, str(amount))
            specs.append(spec)
            key = window_keys.get(charge.scope)
            if key is None:
                key = window_keys[charge.scope] = self.store.window_key(charge.scope, caps, now)
            keys.append(key)
        payload = json.dumps(specs, ensure_ascii=False, separators=(",", ":"))
        try:
            reply = self._batch(keys=keys, args=[payload])
        except redis.RedisError as exc:
            raise BudgetStoreError(f"budget store failed to charge: {type(exc).__name__}") from exc
        verdicts = _text(reply).split(",")
        if len(verdicts) != len(charges):
            raise BudgetStoreError(f"budget store answered {len(verdicts)} of {len(charges)}")
        return [_VERDICTS[verdict] for verdict in verdicts]

    def _window_keys(self, caps: BudgetCaps, now: datetime) -> dict[BudgetScope, str]:
        """The keys of ``now``'s window of this length, by scope (``RedisBudgets.window_key``
        of each), kept for the rest of the window."""
        start = window_start(now, caps.window)
        found = self._keys.get(caps.window)
        if found is None or found[0] != start:
            found = self._keys[caps.window] = (start, {})
        return found[1]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
