"""Budget counters in Redis: one Lua script per check, idempotent per token and window.

Owns the key layout, the charge (``budget_charge.lua``: read the window's counters, refuse or
take the whole increment, remember the verdict under the caller's token), reading usage, and
erasing every budget key of one subject. Redis failures become ``BudgetStoreError``: the
caller defers and never runs unbudgeted.

Key layout: ``<prefix><hex(subject)>:<hex(watcher_id)>:<window seconds>:<window start>``, one
hash per scope and window, where ``subject`` is the canonical JSON array
``["<tenant_id>","<user_id>"]`` (DESIGN.md §2). Hex has no ``:`` and no glob characters, so
``<prefix><hex(subject)>:*`` matches that subject's keys and no other's.

Leaves out the rules (``pipeline.rules.budgets``: caps, windows, verdicts) and what a verdict means
for a watcher or a delivery.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from importlib.resources import files

import redis
import rfc8785

from pipeline.rules.budgets import (
    BudgetCaps,
    BudgetCheck,
    BudgetScope,
    BudgetVerdict,
    Dimension,
    check,
    remaining_after,
    window_end,
    window_start,
)
from pipeline.rules.errors import BudgetStoreError
from pipeline.rules.instants import utc

__all__ = ["DEFAULT_KEY_PREFIX", "EXPIRY_GRACE", "RedisBudgets"]

DEFAULT_KEY_PREFIX = "vigil:budget:"
# Keys outlive their window a little, so a worker whose clock lags still finds its tokens.
EXPIRY_GRACE = timedelta(minutes=5)

_SCRIPT = files("pipeline.redis").joinpath("budget_charge.lua").read_text(encoding="utf-8")
_ERASE_BATCH = 500


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@contextmanager
def _translated(action: str) -> Iterator[None]:
    """Every Redis failure, as the one error callers handle (no URL: it may hold a password)."""
    try:
        yield
    except redis.RedisError as exc:
        raise BudgetStoreError(f"budget store failed to {action}: {type(exc).__name__}") from exc


class RedisBudgets:
    """Per-watcher, per-window budget counters. Thin: no network until the first call."""

    def __init__(self, client: redis.Redis, *, key_prefix: str = DEFAULT_KEY_PREFIX) -> None:
        self._client = client
        self._prefix = key_prefix
        self._charge = client.register_script(_SCRIPT)

    def subject_prefix(self, tenant_id: str, user_id: str) -> str:
        """The prefix every budget key of exactly this subject starts with."""
        return f"{self._prefix}{rfc8785.dumps([tenant_id, user_id]).hex()}:"

    def window_key(self, scope: BudgetScope, caps: BudgetCaps, now: datetime) -> str:
        start = int(window_start(now, caps.window).timestamp())
        seconds = int(caps.window.total_seconds())
        subject = self.subject_prefix(scope.tenant_id, scope.user_id)
        return f"{subject}{scope.watcher_id.encode().hex()}:{seconds}:{start}"

    def charge(
        self,
        scope: BudgetScope,
        caps: BudgetCaps,
        increment: Mapping[Dimension, int],
        token: str,
        now: datetime,
    ) -> BudgetCheck:
        """Charge ``increment`` in ``now``'s window, all or nothing, once per ``token``.

        The same token in the same window returns the first verdict and charges nothing more.
        """
        check(caps, {}, increment)  # validates the amounts before anything reaches Redis
        # Relative to the caller's ``now``, not Redis's clock: a skewed clock shifts the expiry by
        # the skew only, never to "already expired".
        lives = window_end(utc(now), caps.window) + EXPIRY_GRACE - utc(now)
        args: list[str | int] = [token, lives // timedelta(milliseconds=1)]
        for dimension in Dimension:
            cap = caps.cap(dimension)
            args += [dimension.value, -1 if cap is None else cap, increment.get(dimension, 0)]
        with _translated("charge a budget"):
            reply = self._charge(keys=[self.window_key(scope, caps, now)], args=args)
        verdict, exhausted, *used = (_text(part) for part in reply)
        counters = {d: int(u) for d, u in zip(Dimension, used, strict=True)}
        return BudgetCheck(
            BudgetVerdict(verdict),
            Dimension(exhausted) if exhausted else None,
            remaining_after(caps, counters),
        )

    def usage(self, scope: BudgetScope, caps: BudgetCaps, now: datetime) -> dict[Dimension, int]:
        """What ``now``'s window has used so far, per dimension."""
        fields = [f"c:{d.value}" for d in Dimension]
        with _translated("read budget usage"):
            values = self._client.hmget(self.window_key(scope, caps, now), fields)
        pairs = zip(Dimension, values, strict=True)
        return {d: int(_text(v)) if v is not None else 0 for d, v in pairs}

    def erase_subject(self, tenant_id: str, user_id: str) -> int:
        """Delete every budget key of exactly this subject; returns how many were deleted."""
        pattern = f"{self.subject_prefix(tenant_id, user_id)}*"
        deleted = 0
        with _translated("erase a subject's budgets"):
            batch: list[bytes | str] = []
            for key in self._client.scan_iter(match=pattern, count=_ERASE_BATCH):
                batch.append(key)
                if len(batch) >= _ERASE_BATCH:
                    deleted += int(self._client.unlink(*batch))
                    batch.clear()
            if batch:
                deleted += int(self._client.unlink(*batch))
        return deleted
