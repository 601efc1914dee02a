"""The ``event`` record (``schemas/event.v2.avsc``): what an upstream service publishes, and the
evidence the evaluator reads from it.

Owns :func:`event_record` (one event checked: bounded ids and payload, an aware ``observed_at``,
the publishing tenant set by the edge, never the payload), :func:`event_tenant`,
:func:`evidence_from_event` and :class:`SharedEvidence` (one digest however many watchers).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError

from pipeline.records.codec import parse_json
from pipeline.rules.bounds import (
    MAX_JSON_DEPTH,
    MAX_JSON_NODES,
    SAFE_JSON_INT,
    check_instant,
    check_json,
)
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.instants import parse_instant, utc
from pipeline.rules.keys import canonical_json
from pipeline.rules.native import NATIVE

__all__ = [
    "EVENT",
    "MAX_CURSOR_BYTES",
    "MAX_ID_BYTES",
    "MAX_PAYLOAD_BYTES",
    "EventLine",
    "SharedEvidence",
    "checked_instant",
    "event_line",
    "event_record",
    "event_tenant",
    "evidence_from_event",
    "line_record",
    "payload_object",
]

EVENT: Final = "event"
MAX_ID_BYTES: Final = 256
MAX_CURSOR_BYTES: Final = 1024
MAX_PAYLOAD_BYTES: Final = 512 * 1024  # canonical JSON; well under Kafka's 1 MiB default


def _text(value: object, field: str, limit: int, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise DefinitionError("must be a non-empty string", field)
    if len(value) > limit:  # a character is at least one byte: bounded before encoding
        raise DefinitionError(f"longer than {limit} bytes", field)
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: no record can carry it
        raise DefinitionError("is not valid Unicode text (a lone surrogate)", field) from None
    if size > limit:
        raise DefinitionError(f"longer than {limit} bytes", field)
    return value


def event_record(
    source_id: str,
    event_type: str,
    event_id: str,
    payload: Any,
    observed_at: datetime,
    cursor: str | None = None,
    envelope_id: str | None = None,
    tenant_id: str | None = None,
) -> dict[str, Any]:
    """The Avro ``event`` value of one event, or :class:`DefinitionError` naming the field.
    ``tenant_id`` is the publisher's tenant as the publishing edge knows it (DESIGN.md §10
    "Publishers belong to a tenant"), None when it names none.
    The payload is held to what every reader takes (:func:`payload_object`): a JSON object
    within the bounds of DESIGN.md §10, so an event accepted here is never dead-lettered there."""
    if not isinstance(observed_at, datetime) or observed_at.utcoffset() is None:
        raise DefinitionError("must be an aware datetime (with a time zone)", "observed_at")
    if not isinstance(payload, Mapping):  # what every reader takes (payload_object)
        raise DefinitionError("must be a JSON object", "payload")
    check_json(payload, "payload", max_int=SAFE_JSON_INT)  # before any recursive walk
    body = canonical_json(payload, "payload")
    if len(body) > MAX_PAYLOAD_BYTES:
        raise DefinitionError(f"canonical JSON is larger than {MAX_PAYLOAD_BYTES} bytes", "payload")
    return {
        "source_id": _text(source_id, "source_id", MAX_ID_BYTES),
        "event_type": _text(event_type, "event_type", MAX_ID_BYTES),
        "event_id": _text(event_id, "event_id", MAX_ID_BYTES),
        "envelope_id": _text(envelope_id, "envelope_id", MAX_ID_BYTES, optional=True),
        "cursor": _text(cursor, "cursor", MAX_CURSOR_BYTES, optional=True),
        "observed_at": utc(observed_at),
        "payload": body.decode("utf-8"),
        "tenant_id": _text(tenant_id, "tenant_id", MAX_ID_BYTES, optional=True),
    }


def line_record(
    line: EventLine, observed_at: datetime, tenant_id: str | None = None
) -> dict[str, Any]:
    """:func:`event_record` of an event as a publisher wrote it (:func:`event_line`), for the
    publisher's ``tenant_id`` (never a field of the line: the edge sets it)."""
    return event_record(
        line.source_id,
        line.event_type,
        line.event_id,
        line.payload,
        observed_at,
        line.cursor,
        line.envelope_id,
        tenant_id,
    )


class SharedEvidence(Evidence):
    """Evidence whose digest is computed once: every watcher an input reaches asks for it, for
    its receipt and again for its outbox entry, and RFC 8785 of a payload is not cheap."""

    __slots__ = ("_digest",)
    _digest: str | None

    def __post_init__(self) -> None:
        Evidence.__post_init__(self)
        object.__setattr__(self, "_digest", None)  # a set slot: no AttributeError to catch

    def digest(self) -> str:
        digest = self._digest
        if digest is None:
            digest = Evidence.digest(self)
            object.__setattr__(self, "_digest", digest)
        return digest


def payload_object(text: str | None) -> dict[str, Any]:
    """A payload carried as JSON text, within what :func:`event_record` lets a publisher write
    (at most :data:`MAX_PAYLOAD_BYTES`, nesting and numbers RFC 8785 can canonicalize); one that
    is not such a JSON object is undecodable (:class:`SerdeError` with the reason)."""
    if text is None:
        return {}
    payload = parse_json(text, "payload", max_bytes=MAX_PAYLOAD_BYTES, max_int=SAFE_JSON_INT)
    if not isinstance(payload, dict):
        raise SerdeError("payload is not a JSON object")
    return payload


def checked_instant(value: object, field: str) -> datetime:
    """A decoded instant of a record, in years 1970..9999 (else :class:`SerdeError`)."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise SerdeError(f"{field} is not an aware instant")
    try:
        return check_instant(value, field)
    except DefinitionError as exc:
        raise SerdeError(str(exc)) from None


def _field(value: Mapping[str, Any], name: str, limit: int, *, optional: bool = False) -> Any:
    """A decoded text field within the bounds a publisher is held to (else :class:`SerdeError`)."""
    text = value.get(name)
    if type(text) is str and text and len(text) * 4 <= limit:
        return text  # no UTF-8 encoding of it can be longer: the common case, checked cheaply
    try:
        return _text(value.get(name), name, limit, optional=optional)
    except DefinitionError as exc:
        raise SerdeError(str(exc)) from None


def event_tenant(value: Mapping[str, Any]) -> str | None:
    """The publishing tenant a decoded ``event`` value carries (None: a v1 record, or one whose
    publisher named none; a value no publisher could have written is :class:`SerdeError`)."""
    tenant: str | None = _field(value, "tenant_id", MAX_ID_BYTES, optional=True)
    return tenant


# SharedEvidence's slots, in the order evidence_from_event fills them (a test holds this to the
# class's fields): set through the slots, an input's evidence costs 1 µs less than through the
# frozen constructor, whose checks these values already passed.
_EVENT_SLOTS: Final = (
    "source_kind",
    "source_id",
    "observed_at",
    "event_type",
    "event_id",
    "envelope_id",
    "cursor",
    "payload",
    "position",
    "scheduled_at",
    "watcher_key",
    "tool_error",
    "late",
    "tokens",
    "micro_usd",
    "_digest",
)
_SET_SLOTS: Final = tuple(getattr(SharedEvidence, name).__set__ for name in _EVENT_SLOTS)
_NEW: Final = partial(object.__new__, SharedEvidence)
_LIMITS: Final = (MAX_ID_BYTES, MAX_CURSOR_BYTES, MAX_PAYLOAD_BYTES, MAX_JSON_DEPTH, MAX_JSON_NODES)


def evidence_from_event(value: Mapping[str, Any], position: str) -> Evidence:
    """A decoded ``event`` value as evidence, read at input ``position``. A value a publisher
    could not have written through :func:`event_record` (over-long ids, an instant outside
    1970..9999, a payload out of bounds) is undecodable: :class:`SerdeError` with the reason.
    On the native path the plain case is built there (``native/src/event.rs``); whatever it
    leaves, and every refusal, is this function's."""
    if NATIVE is not None:
        native: Evidence | None = NATIVE.event_evidence(
            value, position, _NEW, _SET_SLOTS, EvidenceKind.EVENT, _LIMITS
        )
        if native is not None:
            return native
    values = (
        EvidenceKind.EVENT,
        _field(value, "source_id", MAX_ID_BYTES),
        utc(checked_instant(value.get("observed_at"), "observed_at")),
        _field(value, "event_type", MAX_ID_BYTES),  # a non-empty text, as Evidence requires
        _field(value, "event_id", MAX_ID_BYTES),
        _field(value, "envelope_id", MAX_ID_BYTES, optional=True),
        _field(value, "cursor", MAX_CURSOR_BYTES, optional=True),
        payload_object(value.get("payload")),
        position,
        None,  # an event has no scheduled instant,
        None,  # names no watcher,
        None,  # carries no tool error,
        False,
        0,  # and no usage;
        0,
        None,  # its digest is computed when first asked for
    )
    evidence = object.__new__(SharedEvidence)
    for set_slot, slot_value in zip(_SET_SLOTS, values, strict=True):
        set_slot(evidence, slot_value)
    return evidence


# --- what a publisher writes: one event object of DESIGN.md §9 -----------------------------


class EventLine(BaseModel):
    """One event as a publisher writes it (DESIGN.md §9): a ``vigil publish`` line
    (``pipeline.ops.validate`` reads those), an item of ``POST /v1/events``.
    :func:`event_record` checks the values; this checks the shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source_id: StrictStr
    event_type: StrictStr
    event_id: StrictStr
    observed_at: StrictStr
    cursor: StrictStr | None = None
    envelope_id: StrictStr | None = None
    payload: Any = {}


def event_line(data: object) -> tuple[EventLine, datetime]:
    """An already-parsed event object, validated; :class:`DefinitionError` naming the field."""
    if not isinstance(data, dict):
        raise DefinitionError("expected a JSON object")
    try:
        line = EventLine.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise DefinitionError(message, field) from None
    return line, parse_instant(line.observed_at, "observed_at")
