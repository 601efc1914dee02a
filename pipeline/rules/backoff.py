"""Deterministic, capped, exponential backoff between delivery attempts (DESIGN.md §8).

Owns :class:`RetryPolicy` (attempts, the first included; base and cap of the wait) and the wait
after the n-th failed attempt: ``min(cap, base · 2^(n-1))`` plus a jitter hashed from the delivery
key and ``n``, so replay, restart and every worker agree; a ``Retry-After`` only lengthens it.
Leaves out when to stop (``pipeline.rules.dispatch``) and persisting the due time (delivery)."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from fractions import Fraction
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline.rules.durations import Duration, to_micros
from pipeline.rules.errors import DefinitionError

__all__ = ["MAX_ATTEMPTS", "RetryPolicy", "backoff_wait"]

MAX_ATTEMPTS: Final = 100

_JITTER = Fraction(1, 10)
_U_SCALE = 2**64


def backoff_wait(
    delivery_key: str,
    failed_attempts: int,
    base: timedelta,
    cap: timedelta,
    retry_after: timedelta | None = None,
) -> timedelta:
    """The wait before the next attempt, after ``failed_attempts`` (n ≥ 1) failures.

    Computed exactly in rational microseconds and rounded once to the nearest microsecond, so
    the result never depends on float rounding and matches the reference vectors.
    """
    if failed_attempts < 1:
        raise ValueError(f"failed_attempts must be at least 1, got {failed_attempts}")
    if base <= timedelta(0) or cap < base:
        raise ValueError(f"backoff needs 0 < base <= cap, got base={base} cap={cap}")
    # Past 2^80 µs (far beyond any timedelta) the cap always wins: bound the shift.
    wait = min(to_micros(cap), to_micros(base) << min(failed_attempts - 1, 80))
    digest = hashlib.sha256(f"{delivery_key}:{failed_attempts}".encode()).digest()
    u = Fraction(int.from_bytes(digest[:8], "big"), _U_SCALE)
    chosen = timedelta(microseconds=round(wait + wait * _JITTER * u))
    if retry_after is not None and retry_after > chosen:
        return retry_after
    return chosen


class RetryPolicy(BaseModel):
    """Delivery attempts: ``max_attempts`` counts every attempt, the first included (DESIGN
    §8: default 8, base 5 s, cap 1 h); the retry ceiling is ``pipeline.rules.dispatch``'s."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    max_attempts: int = Field(default=8, ge=1, le=MAX_ATTEMPTS)
    base: Duration = timedelta(seconds=5)
    cap: Duration = timedelta(hours=1)

    @model_validator(mode="after")
    def _base_within_cap(self) -> RetryPolicy:
        if self.base <= timedelta(0) or self.cap < self.base:
            raise DefinitionError("retry backoff needs 0 < base <= cap", "retry.base")
        return self
