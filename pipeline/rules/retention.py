"""How long subject data may live: topic retentions, the caps they put on a watcher's own, and the
read-time rule (DESIGN §10 "Retention per watcher").

Owns the retentions of ``receipts`` and the ``notifications`` ledger (``pipeline.kafka.topics``
configures the topics from them), :func:`check_retentions` (a definition keeping longer is refused)
and :func:`retained` (readers drop a record past its ``retain_until``). Leaves out purging
(delivery's purge timer; append-only topics age out)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from pipeline.rules.errors import DefinitionError

__all__ = [
    "EVIDENCE_TOPIC_RETENTION",
    "FAR_FUTURE",
    "LEDGER_TOPIC_RETENTION",
    "check_retentions",
    "retain_until",
    "retained",
]

EVIDENCE_TOPIC_RETENTION: Final = timedelta(days=30)
"""``receipts``: the longest any watcher's ``evidence_retention`` may be."""
LEDGER_TOPIC_RETENTION: Final = timedelta(days=30)
"""``notifications``: the longest any watcher's ``delivery_retention`` may be."""
FAR_FUTURE: Final = datetime(9999, 12, 31, tzinfo=UTC)
"""What :func:`retain_until` answers when the sum passes the last representable instant."""


def check_retentions(evidence: timedelta, delivery: timedelta) -> None:
    """Refuse a retention longer than the topic that would have to keep it."""
    if evidence > EVIDENCE_TOPIC_RETENTION:
        raise DefinitionError(
            f"at most {EVIDENCE_TOPIC_RETENTION.days}d (the receipts topic's retention)",
            "privacy.evidence_retention",
        )
    if delivery > LEDGER_TOPIC_RETENTION:
        raise DefinitionError(
            f"at most {LEDGER_TOPIC_RETENTION.days}d (the notifications topic's retention)",
            "privacy.delivery_retention",
        )


def retain_until(at: datetime, retention: timedelta) -> datetime:
    """The instant a record made ``at`` stops being readable."""
    try:
        return at + retention
    except OverflowError:
        return FAR_FUTURE


def retained(until: datetime | None, now: datetime) -> bool:
    """Whether a record may still be read at ``now`` (``None``: written before retention was
    recorded, so only the topic's own retention bounds it)."""
    return until is None or now < until
