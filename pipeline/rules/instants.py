"""Instants on the wire and in text: the one place that formats and parses them.

Instants are aware UTC datetimes everywhere inside vigil. Text forms are RFC 3339 with ``Z``:
seconds precision for trigger identities (delivery keys), microseconds for the evidence digest
and stored records. Local time appears only at the edges (cron, ``--at``, quiet hours).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

from pipeline.rules.errors import DefinitionError

__all__ = [
    "Instant",
    "from_epoch_micros",
    "parse_instant",
    "rfc3339_micros",
    "rfc3339_seconds",
    "to_epoch_micros",
    "utc",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc(instant: datetime) -> datetime:
    """``instant`` in UTC; a naive datetime is a programming error, never guessed."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"naive datetime {instant!r}: vigil needs aware instants")
    return instant.astimezone(UTC)


def rfc3339_seconds(instant: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ``: the trigger-identity form (delivery key v1)."""
    return utc(instant).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micros(instant: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ``: the evidence-digest and record form."""
    return utc(instant).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_instant(text: str, field: str = "instant") -> datetime:
    """Parse RFC 3339 with an explicit offset (``Z`` or ``±HH:MM``) into aware UTC."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError as exc:
        raise DefinitionError(f"not an RFC 3339 instant: {text!r}", field) from exc
    if parsed.tzinfo is None:
        raise DefinitionError(f"instant needs an offset such as Z: {text!r}", field)
    return parsed.astimezone(UTC)


def to_epoch_micros(instant: datetime) -> int:
    """Avro ``timestamp-micros``."""
    delta = utc(instant) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_epoch_micros(micros: int) -> datetime:
    return datetime.fromtimestamp(micros // 1_000_000, UTC).replace(microsecond=micros % 1_000_000)


def _instant(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return parse_instant(value)
        except DefinitionError as exc:
            raise ValueError(exc.message) from None
    if isinstance(value, datetime):
        try:
            return utc(value)
        except ValueError:
            raise ValueError("an instant needs an offset such as Z") from None
    return value


Instant = Annotated[
    datetime, BeforeValidator(_instant), PlainSerializer(rfc3339_micros, when_used="json")
]
"""An instant field of a pydantic model: RFC 3339 text or an aware datetime in, UTC; text out."""
