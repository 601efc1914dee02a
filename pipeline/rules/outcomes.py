"""The closed vocabularies of decisions: evaluation outcomes, reason codes, delivery states.

DESIGN.md §11. Receipts, metrics, ``explain`` and replay all use these names; values are the
wire strings, so never rename one.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DeliveryStatus", "ErrorCode", "Outcome", "Reason", "SuppressReason"]


class Outcome(StrEnum):
    SATISFIED = "satisfied"
    TERMINAL_UNSATISFIED = "terminal_unsatisfied"
    PENDING = "pending"
    RESOLVED = "resolved"  # a change watcher's condition turned false after true
    UNAVAILABLE = "unavailable"
    NONE = "none"  # no evaluation happened (not active, expired, authorization denied)


class Reason(StrEnum):
    """Checked in this order; the first that applies decides (DESIGN.md §11)."""

    NOT_ACTIVE = "not_active"
    EXPIRED = "expired"
    AUTHORIZATION_DENIED = "authorization_denied"
    SOURCE_MISMATCH = "source_mismatch"
    MISSED = "missed"  # a cron schedule's occurrence due while nothing ran: skipped, recorded
    STALE = "stale"
    FUTURE_SKEW = "future_skew"
    BUDGET_EXHAUSTED = "budget_exhausted"
    EVALUATOR_MISSING = "evaluator_missing"
    TOOL_ERROR = "tool_error"
    CONDITION_FALSE = "condition_false"
    TERMINAL_CONDITION = "terminal_condition"
    CONDITION_TRUE = "condition_true"


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DISPATCHING = "dispatching"
    DELIVERED = "delivered"
    DEAD_LETTER = "dead_letter"
    SUPPRESSED = "suppressed"
    CANCELLED = "cancelled"


class SuppressReason(StrEnum):
    BUDGET_EXHAUSTED = "budget_exhausted"
    AUTHORIZATION_DENIED = "authorization_denied"
    WATCHER_CLOSED = "watcher_closed"


class ErrorCode(StrEnum):
    """Categorical transport and tool errors: the only error detail vigil ever keeps."""

    TIMEOUT = "timeout"
    CONNECT = "connect"
    TLS = "tls"
    HTTP_4XX = "http_4xx"
    HTTP_410 = "http_410"
    HTTP_429 = "http_429"
    HTTP_5XX = "http_5xx"
    REJECTED = "rejected"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"
