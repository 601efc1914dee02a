"""The closed union of watcher sources (DESIGN.md §3, §9): event, polling, schedule.

Owns the source models, their field rules (pinned tools, cron + IANA zone, cadence, missed-run
policy, one-shot ``at``) and the reference charsets shared with ``definition``. Cron
enumeration, zones and missed-run selection are ``cron`` and ``zones``; this module only
validates and exposes them.
"""

from __future__ import annotations

import re
from datetime import timedelta
from functools import cached_property, lru_cache
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from pipeline.rules.credentials import reject_credential
from pipeline.rules.cron import CronSchedule, MissedPolicy, cadence_cron
from pipeline.rules.durations import Duration
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import Instant
from pipeline.rules.zones import load_zone

__all__ = [
    "CADENCES",
    "DEFAULT_SCHEDULE_MAX_AGE",
    "EventSource",
    "PollingSource",
    "ScheduleSource",
    "Source",
    "checked_ref",
]

CADENCES: Final = frozenset(timedelta(minutes=m) for m in (1, 5, 15, 60))
DEFAULT_SCHEDULE_MAX_AGE: Final = timedelta(minutes=5)
MAX_REF_LENGTH: Final = 200
_MEMO: Final = 4096  # (reference, field, charset) triples remembered as checked

_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]*")
_TOOL = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*@v[0-9]+")
_EVENT_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/\-]*")


def checked_ref(value: object, field: str, pattern: re.Pattern[str] = _REF) -> str:
    """An opaque registry reference: bounded length (checked first, before any expression),
    no credential, a safe charset."""
    if type(value) is str and len(value) <= MAX_REF_LENGTH:
        return _checked_text(value, field, pattern)
    return _checked(value, field, pattern)


@lru_cache(maxsize=_MEMO)
def _checked_text(value: str, field: str, pattern: re.Pattern[str]) -> str:
    """:func:`checked_ref` of a bounded string, remembered: an evaluator opening thousands of
    definitions meets the same tenant, user, event type and target in most of them, and the
    credential scan is the costly part. Refusals are not remembered (they raise)."""
    return _checked(value, field, pattern)


def _checked(value: object, field: str, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str):
        raise DefinitionError(f"a reference is a string, not {type(value).__name__}", field)
    if len(value) > MAX_REF_LENGTH:
        raise DefinitionError(
            f"a reference is at most {MAX_REF_LENGTH} characters, got {len(value)}", field
        )
    reject_credential(value, field)
    if pattern.fullmatch(value) is None:
        raise DefinitionError(
            f"invalid reference {value[:80]!r}: letters, digits and . _ : - "
            f"(at most {MAX_REF_LENGTH})",
            field,
        )
    return value


class _Source(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class EventSource(_Source):
    """Pushed events of one exact type from one source."""

    kind: Literal["event"]
    source_id: str
    event_type: str
    max_age: Duration

    @model_validator(mode="after")
    def _refs(self) -> EventSource:
        checked_ref(self.source_id, "source.source_id")
        checked_ref(self.event_type, "source.event_type", _EVENT_TYPE)
        return self


class PollingSource(_Source):
    """A governed, version-pinned tool called on a cron (or an agent watch's cadence)."""

    kind: Literal["polling"]
    source_id: str
    tool: str
    tool_ref: str | None = None
    target: str | None = None
    cron: str | None = None
    timezone: str | None = None
    cadence: Duration | None = None
    missed: str | dict[str, int] | None = None
    max_age: Duration

    @model_validator(mode="after")
    def _rules(self) -> PollingSource:
        checked_ref(self.source_id, "source.source_id")
        if _TOOL.fullmatch(self.tool) is None:
            raise DefinitionError("a tool is pinned as key@vN, e.g. http.json@v1", "source.tool")
        if (self.tool_ref is None) == (self.target is None):
            raise DefinitionError("name exactly one of tool_ref and target", "source.tool_ref")
        if self.tool_ref is not None:
            checked_ref(self.tool_ref, "source.tool_ref")
        if self.target is not None:
            checked_ref(self.target, "source.target")
        if (self.cron is None) == (self.cadence is None):
            raise DefinitionError("name exactly one of cron and cadence", "source.cron")
        if self.cadence is not None:
            if self.cadence not in CADENCES:
                raise DefinitionError("cadence is 1m, 5m, 15m or 60m", "source.cadence")
            if self.timezone is not None:
                raise DefinitionError("a cadence runs in UTC; omit timezone", "source.timezone")
        else:
            if self.timezone is None:
                raise DefinitionError("a cron needs an IANA timezone", "source.timezone")
            _check_cron(self.cron, self.timezone)
            if self.missed is None:  # seed 000: the policy is stated; no silent default
                raise DefinitionError(
                    'state the missed-run policy: "skip", "latest" or {"bounded": n}',
                    "source.missed",
                )
        if self.missed is not None:
            MissedPolicy.parse(self.missed, "source.missed")
        return self

    @property
    def governed_tool(self) -> str:
        """What grants name in ``tools``: the registry ref, else the pinned tool key."""
        return self.tool_ref if self.tool_ref is not None else self.tool

    @property
    def cron_expression(self) -> str:
        """The five-field cron; a cadence of N minutes is ``*/N * * * *`` (60: ``0 * * * *``)."""
        if self.cron is not None:
            return self.cron
        assert self.cadence is not None
        return cadence_cron(int(self.cadence.total_seconds()) // 60)

    @property
    def zone_name(self) -> str:
        return self.timezone if self.timezone is not None else "UTC"

    @cached_property
    def schedule(self) -> CronSchedule:
        return CronSchedule.parse(self.cron_expression, self.zone_name, "source.cron")

    @cached_property
    def missed_policy(self) -> MissedPolicy:
        """As stated (a cron must state it); a cadence without one is ``latest`` (DESIGN.md
        §10)."""
        return MissedPolicy.parse(self.missed if self.missed is not None else "latest")


class ScheduleSource(_Source):
    """Time alone: a one-shot ``at`` or a cron in a zone. Missed cron fires are skipped."""

    kind: Literal["schedule"]
    source_id: str | None = None
    at: Instant | None = None
    cron: str | None = None
    timezone: str | None = None
    max_age: Duration = DEFAULT_SCHEDULE_MAX_AGE

    @model_validator(mode="after")
    def _rules(self) -> ScheduleSource:
        if self.source_id is not None:
            checked_ref(self.source_id, "source.source_id")
        if (self.at is None) == (self.cron is None):
            raise DefinitionError("name exactly one of at and cron", "source.at")
        if self.cron is not None:
            if self.timezone is None:
                raise DefinitionError("a cron needs an IANA timezone", "source.timezone")
            _check_cron(self.cron, self.timezone)
        elif self.timezone is not None:
            raise DefinitionError("`at` is an absolute instant; omit timezone", "source.timezone")
        return self


Source = EventSource | PollingSource | ScheduleSource


def _check_cron(expr: str | None, timezone: str) -> None:
    load_zone(timezone, "source.timezone")
    CronSchedule.parse(expr or "", timezone, "source.cron")
