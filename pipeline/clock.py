"""The one place vigil reads the wall clock.

Owns :class:`Clock`, :class:`SystemClock`, :class:`ManualClock` (tests) and, for fault tests
that run whole processes only, :class:`ScaledClock` via :func:`clock_from_env`. Rule modules never
import this: they take ``now`` (an aware UTC datetime); processes read the clock once per step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol

from pipeline.rules.errors import ConfigError

__all__ = [
    "CLOCK_ANCHOR_ENV",
    "CLOCK_RATE_ENV",
    "Clock",
    "ManualClock",
    "ScaledClock",
    "SystemClock",
    "clock_from_env",
]

CLOCK_RATE_ENV: Final = "VIGIL_TEST_CLOCK_RATE"
CLOCK_ANCHOR_ENV: Final = "VIGIL_TEST_CLOCK_ANCHOR"


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, aware, in UTC."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to (tests, replay)."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start.astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def set(self, instant: datetime) -> None:
        self._now = instant.astimezone(UTC)

    def advance(self, delta: timedelta) -> None:
        self._now += delta


class ScaledClock:
    """Test-only: wall time that runs ``rate`` times faster from ``anchor`` (epoch seconds).

    At the anchor it reads the real time; ``n`` real seconds later it reads ``rate * n``
    seconds later. Every process given the same anchor and rate reads the same instant.

    For fault tests only, through :func:`clock_from_env`: ``VIGIL_TEST_CLOCK_RATE`` (and the shared
    ``VIGIL_TEST_CLOCK_ANCHOR``, epoch seconds) make every process of a test agree on a time that
    runs that many times faster than the wall clock from the anchor, and a restarted process
    continues it. Unset (always, outside tests), processes use the real clock.
    """

    def __init__(self, anchor: float, rate: float) -> None:
        if not 0 < rate <= 3600:
            raise ConfigError(f"{CLOCK_RATE_ENV} must be in (0, 3600], not {rate!r}")
        self._anchor = anchor
        self._rate = rate

    def now(self) -> datetime:
        scaled = self._anchor + (time.time() - self._anchor) * self._rate
        return datetime.fromtimestamp(scaled, UTC)


def clock_from_env(environ: Mapping[str, str]) -> Clock:
    """The process clock: the real one, or a :class:`ScaledClock` when a test asks for one."""
    rate = environ.get(CLOCK_RATE_ENV)
    if not rate:
        return SystemClock()
    try:
        scale = float(rate)
        anchor = float(environ.get(CLOCK_ANCHOR_ENV) or time.time())
    except ValueError:
        raise ConfigError(f"{CLOCK_RATE_ENV} and {CLOCK_ANCHOR_ENV} must be numbers") from None
    return ScaledClock(anchor, scale)
