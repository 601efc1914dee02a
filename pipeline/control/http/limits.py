"""How often one caller may ask: token buckets for the HTTP API and the console (DESIGN.md §10).

Owns :class:`RateLimiter`, a bucket per key (a principal for ``/v1`` and signed-in pages, a client
address for sign-in) refilled at ``rate`` up to ``burst``; :meth:`RateLimiter.take` answers None or
the seconds to wait (sent as 429 ``Retry-After``). At most ``max_keys`` buckets, least recently seen
out first. Left out: who the key is (``guard``, the console) and the answer's shape (``auth``)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

__all__ = ["DEFAULT_MAX_KEYS", "RateLimiter"]

DEFAULT_MAX_KEYS: Final = 100_000


class RateLimiter:
    """``burst`` requests at once per key, then ``rate`` per second."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        max_keys: int = DEFAULT_MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a rate limit needs a positive rate and a burst of at least 1")
        self._rate = rate
        self._burst = float(burst)
        self._max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at
        self._lock = threading.Lock()

    def take(self, key: str) -> float | None:
        """Spend one request of ``key``'s bucket: None when allowed, else the seconds to wait."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.pop(key, (self._burst, now))
            tokens = min(self._burst, tokens + (now - at) * self._rate)
            wait = None if tokens >= 1.0 else (1.0 - tokens) / self._rate
            self._buckets[key] = (tokens - 1.0 if wait is None else tokens, now)
            while len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
        return wait
