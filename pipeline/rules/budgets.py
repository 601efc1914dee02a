"""Per-window budgets, pure: dimensions, caps, window math and the all-or-nothing check.

Fixed UTC windows (``start = floor(epoch_seconds / length) · length``) cap evaluations, unique
deliveries, attempts, tokens and micro-USD per ``(tenant_id, user_id, watcher_id)`` (DESIGN.md §3,
§8); a charge fits in every dimension and is taken whole, or is refused naming the first one that
ran out. Leaves out counters and atomicity (``pipeline.redis.budgets``) and what a refusal means
(``pipeline.rules.evaluation``, ``pipeline.rules.dispatch``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any, Final, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.rules.durations import check_duration, parse_duration, to_micros
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import from_epoch_micros, to_epoch_micros

__all__ = [
    "MAX_AMOUNT",
    "NO_CEILINGS",
    "BudgetCaps",
    "BudgetCeilings",
    "BudgetCheck",
    "BudgetScope",
    "BudgetVerdict",
    "Charge",
    "Dimension",
    "attempt_token",
    "check",
    "offset_token",
    "remaining_after",
    "resolve_caps",
    "window_end",
    "window_start",
]

# Redis Lua numbers are doubles: every cap, counter and increment must stay exact in one.
MAX_AMOUNT = 2**53 - 1

Amount = Annotated[int, Field(ge=0, le=MAX_AMOUNT)]


class Dimension(StrEnum):
    """What a window caps. Declaration order is the order a refusal is reported in."""

    EVALUATIONS = "evaluations"
    DELIVERIES = "deliveries"
    ATTEMPTS = "attempts"
    TOKENS = "tokens"
    MICRO_USD = "micro_usd"


class BudgetVerdict(StrEnum):
    OK = "ok"
    EXHAUSTED = "exhausted"
    UNAVAILABLE = "unavailable"  # the store is down: defer, never run unbudgeted


class BudgetCaps(BaseModel):
    """One window length and a cap per dimension.

    ``None`` means "the operator's default", filled in by :meth:`with_defaults`; a dimension
    still ``None`` after that is uncapped. ``0`` allows nothing that costs more than 0.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    window: timedelta
    evaluations: Amount | None = None
    deliveries: Amount | None = None
    attempts: Amount | None = None
    tokens: Amount | None = None
    micro_usd: Amount | None = None

    @field_validator("window", mode="before")
    @classmethod
    def _parse_window(cls, value: Any) -> Any:
        return parse_duration(value, "window") if isinstance(value, str) else value

    @field_validator("window")
    @classmethod
    def _whole_seconds(cls, value: timedelta) -> timedelta:
        # Whole seconds keep window starts on the epoch-seconds grid of DESIGN.md §8.
        if value < timedelta(seconds=1) or value.microseconds:
            raise ValueError("a budget window is a positive whole number of seconds")
        return check_duration(value, "window")

    def cap(self, dimension: Dimension) -> int | None:
        value: int | None = getattr(self, dimension.value)
        return value

    def with_defaults(self, defaults: BudgetCaps) -> BudgetCaps:
        """These caps with every ``None`` dimension taken from the operator's ``defaults``."""
        filled = {d.value: defaults.cap(d) for d in Dimension if self.cap(d) is None}
        return self.model_copy(update=filled)


class BudgetCeilings(BaseModel):
    """The operator's ceilings (``[budgets.ceilings]``, DESIGN.md §10 "Limits"): per dimension
    the most one window may allow. ``None``: no ceiling.

    A definition naming a cap above its ceiling is refused where it is accepted
    (:meth:`check`); wherever caps are resolved they are clamped again (:func:`resolve_caps`),
    so a definition accepted before a ceiling was lowered cannot exceed it either.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    evaluations: Amount | None = None
    deliveries: Amount | None = None
    attempts: Amount | None = None
    tokens: Amount | None = None
    micro_usd: Amount | None = None

    def ceiling(self, dimension: Dimension) -> int | None:
        value: int | None = getattr(self, dimension.value)
        return value

    def check(self, caps: BudgetCaps, field: str = "budgets") -> BudgetCaps:
        """``caps`` if none of its named caps exceeds a ceiling, else a refusal naming it."""
        for dimension in Dimension:
            cap, ceiling = caps.cap(dimension), self.ceiling(dimension)
            if cap is not None and ceiling is not None and cap > ceiling:
                raise DefinitionError(
                    f"{cap} exceeds the operator's ceiling of {ceiling}",
                    f"{field}.{dimension.value}",
                )
        return caps

    def clamp(self, caps: BudgetCaps) -> BudgetCaps:
        """``caps`` with each dimension at most its ceiling (an uncapped one gets the ceiling)."""
        lowered: dict[str, int] = {}
        for dimension in Dimension:
            cap, ceiling = caps.cap(dimension), self.ceiling(dimension)
            if ceiling is not None and (cap is None or cap > ceiling):
                lowered[dimension.value] = ceiling
        return caps.model_copy(update=lowered) if lowered else caps


NO_CEILINGS: Final = BudgetCeilings()


def resolve_caps(
    caps: BudgetCaps | None, defaults: BudgetCaps, ceilings: BudgetCeilings = NO_CEILINGS
) -> BudgetCaps:
    """The caps a window is charged against: a definition's own caps, every cap it leaves out
    taken from the operator's ``defaults``, each at most its ceiling."""
    filled = defaults if caps is None else caps.with_defaults(defaults)
    return ceilings.clamp(filled) if ceilings is not NO_CEILINGS else filled


class BudgetScope(NamedTuple):
    """Whose counters: budgets are per watcher, inside exactly one subject. (Tuples, this and
    :class:`Charge`: one charge is built and its scope hashed per evaluation.)"""

    tenant_id: str
    user_id: str
    watcher_id: str


class Charge(NamedTuple):
    """One charge: whose window, its caps, the amounts to take and the idempotency token that
    makes a retried charge count once per window (DESIGN §10 "Budgets and transactions")."""

    scope: BudgetScope
    caps: BudgetCaps
    increment: Mapping[Dimension, int]
    token: str


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    """The verdict of one charge. ``remaining`` is per dimension after it (``None``: uncapped);
    ``exhausted`` names the first dimension that would have gone over."""

    verdict: BudgetVerdict
    exhausted: Dimension | None = None
    remaining: Mapping[Dimension, int | None] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def unavailable(cls) -> BudgetCheck:
        return cls(BudgetVerdict.UNAVAILABLE)

    def verdict_for(self, dimension: Dimension) -> BudgetVerdict:
        """The verdict as one dimension sees it: exhausted only if that dimension ran out."""
        if self.verdict is BudgetVerdict.EXHAUSTED and self.exhausted is not dimension:
            return BudgetVerdict.OK
        return self.verdict


def _amounts(values: Mapping[Dimension, int], what: str) -> dict[Dimension, int]:
    checked: dict[Dimension, int] = {}
    for dimension, amount in values.items():
        dim = Dimension(dimension)
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise DefinitionError("must be an integer", f"{what}.{dim.value}")
        if not 0 <= amount <= MAX_AMOUNT:
            raise DefinitionError(f"must be in 0..{MAX_AMOUNT}", f"{what}.{dim.value}")
        checked[dim] = amount
    return checked


def check(
    caps: BudgetCaps, used: Mapping[Dimension, int], increment: Mapping[Dimension, int]
) -> BudgetCheck:
    """Would ``increment`` fit on top of ``used``? All or nothing: one dimension over refuses
    the whole charge, so a refused charge leaves every counter where it was."""
    spent = _amounts(used, "used")
    wanted = _amounts(increment, "increment")
    exhausted: Dimension | None = None
    for dimension in Dimension:
        cap = caps.cap(dimension)
        if cap is not None and spent.get(dimension, 0) + wanted.get(dimension, 0) > cap:
            exhausted = dimension
            break
    after = spent if exhausted else {d: spent.get(d, 0) + wanted.get(d, 0) for d in Dimension}
    return BudgetCheck(
        BudgetVerdict.EXHAUSTED if exhausted else BudgetVerdict.OK,
        exhausted,
        remaining_after(caps, after),
    )


def remaining_after(
    caps: BudgetCaps, used: Mapping[Dimension, int]
) -> Mapping[Dimension, int | None]:
    """What is left per dimension given ``used`` (never below 0; ``None`` when uncapped)."""
    left: dict[Dimension, int | None] = {}
    for dimension in Dimension:
        cap = caps.cap(dimension)
        left[dimension] = None if cap is None else max(0, cap - used.get(dimension, 0))
    return MappingProxyType(left)


def _length_micros(length: timedelta) -> int:
    micros = to_micros(length)
    if micros <= 0:
        raise ValueError(f"a window length must be positive, got {length}")
    return micros


def window_start(t: datetime, length: timedelta) -> datetime:
    """``floor(epoch_seconds / length) · length`` in UTC (DESIGN.md §8)."""
    size = _length_micros(length)
    return from_epoch_micros(to_epoch_micros(t) // size * size)


def window_end(t: datetime, length: timedelta) -> datetime:
    """The first instant of the next window: where a new window starts from zero."""
    return window_start(t, length) + length


def attempt_token(delivery_key: str, attempt: int, redeliveries: int = 0) -> str:
    """The idempotency token of one delivery attempt (DESIGN.md §10); ``redeliveries`` counts
    the redeliver commands before it (before any, the original token)."""
    if redeliveries == 0:
        return f"attempt:{delivery_key}:{attempt}"
    return f"attempt:{delivery_key}:r{redeliveries}:{attempt}"


def offset_token(topic: str, partition: int, offset: int) -> str:
    """The idempotency token of charging for one input record (DESIGN.md §10)."""
    return f"offset:{topic}:{partition}:{offset}"
