"""A watcher's runtime state, as the evaluator keeps it in ``watcher-state`` (DESIGN.md §2).

Owns :class:`WatcherState` and :class:`AppliedTrigger` (last evidence applied), the bounded memory
of applied triggers that refuses a second entry for the same evidence, and a change watcher's last
truth. Both are checked named tuples: constructor and :meth:`WatcherState.replace` check every
field, ``_make`` does not (rules' own values only). Changes are ``evaluation``'s; storage the
runtime's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final, NamedTuple, TypeVar

from pipeline.rules.errors import DefinitionError
from pipeline.rules.lifecycle import CloseReason, WatcherStatus
from pipeline.rules.outcomes import Outcome, Reason

__all__ = ["RECENT_TRIGGERS", "AppliedTrigger", "WatcherState"]

RECENT_TRIGGERS: Final = 64

_Member = TypeVar("_Member", WatcherStatus, Outcome, Reason, CloseReason)


class _AppliedTriggerFields(NamedTuple):
    trigger_key: str  # the delivery key of the evidence's trigger identity
    trigger: dict[str, str]
    observed_at: datetime
    position: str | None = None


class AppliedTrigger(_AppliedTriggerFields):
    """The last evidence applied to this watcher; replay after a denial starts here."""

    __slots__ = ()

    def __new__(
        cls,
        trigger_key: str,
        trigger: Mapping[str, str],
        observed_at: datetime,
        position: str | None = None,
    ) -> AppliedTrigger:
        return cls._make(
            (
                _text(trigger_key, "checkpoint.trigger_key"),
                _identity(trigger),
                _instant(observed_at, "checkpoint.observed_at"),
                None if position is None else _text(position, "checkpoint.position"),
            )
        )


class _StateFields(NamedTuple):
    version: int
    status: WatcherStatus
    activated_at: datetime | None = None
    checkpoint: AppliedTrigger | None = None
    recent_triggers: tuple[str, ...] = ()
    last_outcome: Outcome | None = None
    last_reason: Reason | None = None
    evaluations: int = 0
    closed_reason: CloseReason | None = None
    revision: int = 0
    holds: bool | None = None  # change mode: the condition's last known truth (None: unknown)
    notified_at: datetime | None = None  # change mode: the last firing or repeat notification


class WatcherState(_StateFields):
    """Status, checkpoint and counters of one watcher version. ``revision`` advances per change."""

    __slots__ = ()

    def __new__(
        cls,
        version: int,
        status: WatcherStatus | str,
        activated_at: datetime | None = None,
        checkpoint: AppliedTrigger | None = None,
        recent_triggers: Iterable[str] = (),
        last_outcome: Outcome | str | None = None,
        last_reason: Reason | str | None = None,
        evaluations: int = 0,
        closed_reason: CloseReason | str | None = None,
        revision: int = 0,
        holds: bool | None = None,
        notified_at: datetime | None = None,
    ) -> WatcherState:
        return cls._make(
            (
                _count(version, "version"),
                _member(WatcherStatus, status, "status"),
                None if activated_at is None else _instant(activated_at, "activated_at"),
                _checkpoint(checkpoint),
                _triggers(recent_triggers),
                None if last_outcome is None else _member(Outcome, last_outcome, "last_outcome"),
                None if last_reason is None else _member(Reason, last_reason, "last_reason"),
                _count(evaluations, "evaluations"),
                None
                if closed_reason is None
                else _member(CloseReason, closed_reason, "closed_reason"),
                _count(revision, "revision"),
                _truth(holds),
                None if notified_at is None else _instant(notified_at, "notified_at"),
            )
        )

    def replace(self, **changes: Any) -> WatcherState:
        """This state with ``changes`` (field names as keywords), checked as the constructor
        checks them."""
        return WatcherState(**{**self._asdict(), **changes})

    def applied(self, trigger_key: str) -> bool:
        """Whether evidence with this trigger identity already reached this version."""
        return trigger_key in self.recent_triggers

    def remember(self, trigger_key: str) -> tuple[str, ...]:
        """``recent_triggers`` with ``trigger_key`` added, bounded to the newest ones."""
        kept = self.recent_triggers
        if trigger_key in kept:  # rare: evidence seen again
            kept = tuple(k for k in kept if k != trigger_key)
        return (*kept, trigger_key)[-RECENT_TRIGGERS:]


def _count(value: object, field: str) -> int:
    if type(value) is not int or value < 0:
        raise DefinitionError(f"a non-negative integer, not {value!r:.40}", field)
    return value


def _truth(value: object) -> bool | None:
    if value is not None and type(value) is not bool:
        raise DefinitionError(f"true, false or null, not {value!r:.40}", "holds")
    return value


def _text(value: object, field: str) -> str:
    if type(value) is not str:
        raise DefinitionError(f"a string, not {type(value).__name__}", field)
    return value


def _instant(value: object, field: str) -> datetime:
    if not isinstance(value, datetime):
        raise DefinitionError(f"an instant, not {type(value).__name__}", field)
    return value


def _member(kind: type[_Member], value: str, field: str) -> _Member:
    found: _Member | None = _MEMBERS[kind].get(value) if isinstance(value, str) else None
    if found is None:
        raise DefinitionError(f"not a {kind.__name__}: {value!r:.40}", field)
    return found


_MEMBERS: Final[dict[type[Any], dict[str, Any]]] = {
    kind: {member.value: member for member in kind}
    for kind in (WatcherStatus, Outcome, Reason, CloseReason)
}
"""Each enum's members by value (a member is found by itself too: it is its value's string)."""


def _identity(value: object) -> dict[str, str]:
    if type(value) is not dict and not isinstance(value, Mapping):  # a dict: no ABC check
        raise DefinitionError("an object of strings", "checkpoint.trigger")
    if not _strings(value) or not _strings(value.values()):
        raise DefinitionError("an object of strings", "checkpoint.trigger")
    return dict(value)


def _strings(values: Iterable[object]) -> bool:
    """Whether every value is exactly a ``str`` (one C-level pass over the types)."""
    return set(map(type, values)) <= {str}


def _checkpoint(value: object) -> AppliedTrigger | None:
    if value is None or isinstance(value, AppliedTrigger):
        return value
    raise DefinitionError(f"an AppliedTrigger, not {type(value).__name__}", "checkpoint")


def _triggers(value: Iterable[str]) -> tuple[str, ...]:
    plain = type(value) is tuple or type(value) is list  # else the slower checks
    if not plain and isinstance(value, str | bytes | Mapping):
        raise DefinitionError("a list of delivery keys", "recent_triggers")
    kept = tuple(value)
    if not _strings(kept):
        raise DefinitionError("a list of delivery keys", "recent_triggers")
    return kept
