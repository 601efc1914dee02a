"""Freshness and source matching: is this evidence the watcher's, and is it recent enough?

Fresh iff ``now - max_age <= observed_at <= now + 30 s`` (DESIGN.md §3); without a ``max_age``
(a one-shot schedule's fire, ``pipeline.rules.schedules``) only the future bound holds. Evidence
matches a source when kind and source id agree (events: the event type too) and a tick names
this watcher. Authorization and what a mismatch does to the checkpoint are ``evaluation``'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.instants import utc

__all__ = ["FUTURE_SKEW", "Freshness", "freshness", "kind_matches"]

FUTURE_SKEW: Final = timedelta(seconds=30)


class Freshness(StrEnum):
    FRESH = "fresh"
    STALE = "stale"
    FUTURE_SKEW = "future_skew"


def freshness(evidence: Evidence, max_age: timedelta | None, now: datetime) -> Freshness:
    """Judge ``evidence.observed_at`` against ``now``; both bounds are inclusive."""
    now = utc(now)
    if max_age is not None and evidence.observed_at < now - max_age:
        return Freshness.STALE
    if evidence.observed_at > now + FUTURE_SKEW:
        return Freshness.FUTURE_SKEW
    return Freshness.FRESH


def kind_matches(evidence: Evidence, source_kind: str) -> bool:
    """Definition kinds are ``event | polling | schedule``; evidence says ``poll``."""
    return _KINDS.get(source_kind, EvidenceKind.SCHEDULE) is evidence.source_kind


_KINDS: Final = {"event": EvidenceKind.EVENT, "polling": EvidenceKind.POLL}
