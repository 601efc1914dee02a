"""The receipt: the immutable, privacy-filtered record of one evaluation (DESIGN.md §10, §11).

Owns :class:`Receipt`: what was decided, why, on which evidence and definition version, with the
authorization and budget verdicts replay takes as recorded. Read back after its data key was
shredded it is ``erased``: trigger and payload gone, decision metadata kept until retention.
Which payload it keeps is ``evaluation``'s (via ``privacy``); encryption and retention are the
writer's."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.outcomes import ErrorCode, Outcome, Reason

__all__ = ["Receipt"]


class Receipt(NamedTuple):
    """One evaluation's record. A plain named tuple (no validation here, and built once per
    evaluation: a frozen dataclass's constructor cost 3 µs of it): ``evaluation`` builds it
    from the rules' own values, and ``pipeline.records.receipt`` checks what it reads back
    before it builds one. Build it with keywords; the fields with defaults come last."""

    tenant_id: str
    user_id: str
    watcher_id: str
    watcher_version: int
    evaluated_at: datetime
    evidence_digest: str
    trigger: dict[str, str]
    trigger_key: str
    observed_at: datetime
    outcome: Outcome
    reason: Reason
    authorized: bool | None  # None: not checked (an earlier step decided)
    position: str | None = None
    authorization: str = ""
    budget: BudgetVerdict | None = None  # None: not consulted
    tool_error: ErrorCode | None = None
    payload: dict[str, Any] | None = None
    delivery_key: str | None = None
    note: str = ""
    erased: bool = False  # its sealed fields' key is gone (cancel, erasure)
    retain_until: datetime | None = None  # unreadable from then on (evidence_retention)
