"""Outbox entries for adapter tests: the fields a destination reads come from the test, the rest
(version, source, purpose, creation, retry, retention) get fixed values here."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pipeline.rules.backoff import RetryPolicy
from pipeline.rules.outbox import OutboxEntry

__all__ = ["outbox_entry"]


def outbox_entry(**fields: Any) -> OutboxEntry:
    """An entry of ``fields`` (``due_at`` required), created at its due time."""
    rest: dict[str, Any] = {
        "watcher_version": 1,
        "source_id": "ci",
        "purpose": "ops.alert",
        "trigger": {},
        "created_at": fields["due_at"],
        "retry": RetryPolicy(),
        "delivery_retention": timedelta(days=30),
    }
    return OutboxEntry(**(rest | fields))
