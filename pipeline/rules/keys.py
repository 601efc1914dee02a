"""Exact encodings every process and replay must agree on: canonical JSON, record keys, the delivery
key v1, derived keys and the evidence digest v1 (DESIGN.md §2, §8, §10).

The delivery key (the dedupe identity) hashes subject, watcher version, source and trigger only, so
the same evidence seen twice yields the same key; the evidence digest covers everything, for audit,
never dedupe. ``vigil_native`` writes them byte for byte when it can (``native``). Leaves out
building evidence and choosing triggers: this module only encodes what it is given."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Final, Literal

import rfc8785

from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import rfc3339_micros, rfc3339_seconds
from pipeline.rules.native import NATIVE

__all__ = [
    "DELIVERY_KEY_V1",
    "DERIVED_KEY_V1",
    "EVIDENCE_FIELDS",
    "EventTrigger",
    "InstantTrigger",
    "RequestTrigger",
    "Trigger",
    "canonical_json",
    "check_delivery_key",
    "delivery_key",
    "delivery_key_from",
    "delivery_key_prefix",
    "derived_delivery_key",
    "encode_fields",
    "evidence_digest",
    "evidence_digest_of",
    "parse_subject_key",
    "parse_watcher_key",
    "request_delivery_key",
    "subject_key",
    "subject_of",
    "trigger_fields",
    "watcher_key",
]

DELIVERY_KEY_V1: Final = "vigil.delivery.v1"
DERIVED_KEY_V1: Final = "vigil.derived.v1"
EVIDENCE_FIELDS: Final = frozenset(
    {
        "source_kind",
        "source_id",
        "event_type",
        "event_id",
        "envelope_id",
        "cursor",
        "observed_at",
        "scheduled_at",
        "payload",
    }
)
_INSTANT_FIELDS: Final = ("observed_at", "scheduled_at")
_DIGEST_ORDER: Final = tuple(sorted(EVIDENCE_FIELDS))  # RFC 8785 key order of the nine fields
_HEX_KEY = re.compile(r"[0-9a-f]{64}")
_MAX_FIELD_BYTES: Final = 2**32 - 1
_SAFE_INT: Final = 2**53 - 1
_ASTRAL: Final = "\U00010000"  # from here on UTF-16 order differs from code point order
# Escapes exactly `"`, `\\` and U+0000..U+001F (short forms where JSON has them, else \u00xx):
# RFC 8785 section 3.2.2.2.
_quote: Final[Callable[[str], str]] = json.encoder.encode_basestring
_DIGEST_NAMES: Final = tuple(_quote(name) + ":" for name in _DIGEST_ORDER)  # '"cursor":' …


def canonical_json(value: Any, field: str | None = None) -> bytes:
    """RFC 8785 (JCS) bytes of ``value``.

    Raises DefinitionError for NaN and infinities, integers outside ±(2^53 - 1), non-string
    object keys, lone surrogates and anything that is not JSON (sets, bytes, datetimes).

    Values made only of strings, safe integers, booleans, null, lists and objects whose keys
    sort the same by code point as by UTF-16 unit are written here in one pass with the C
    string escaper of ``json`` (the escapes RFC 8785 prescribes), at a small fraction of
    ``rfc8785``'s cost; floats (ECMAScript number form) and everything else go to ``rfc8785``.
    """
    if NATIVE is not None and (native := NATIVE.canonical_json(value)) is not None:
        return bytes(native)
    try:
        return _plain(value).encode("utf-8")
    except (_NotPlain, RecursionError, UnicodeEncodeError, TypeError):
        pass  # not the plain subset, too deep, or a lone surrogate: rfc8785 decides
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        raise DefinitionError(f"not canonical JSON: {exc}", field) from exc
    except RecursionError as exc:
        raise DefinitionError("not canonical JSON: nested too deeply", field) from exc
    except UnicodeError as exc:  # rfc8785 sorts keys as UTF-16: a lone surrogate key fails there
        raise DefinitionError("not canonical JSON: a lone surrogate in a key", field) from exc


class _NotPlain(Exception):
    """Not of the plain subset: ``rfc8785`` writes it (or names why it cannot)."""


def _plain(value: Any) -> str:
    """The RFC 8785 text of a value of the plain subset; raises ``_NotPlain`` otherwise."""
    kind = type(value)
    if kind is str:
        return _quote(value)
    if kind is dict:
        items = sorted(value.items())  # keys are unique: only they are compared
        for key, _ in items:
            if type(key) is not str or not (key.isascii() or max(key) < _ASTRAL):
                raise _NotPlain
        return "{" + ",".join([_quote(key) + ":" + _plain(item) for key, item in items]) + "}"
    if kind is int:
        if -_SAFE_INT <= value <= _SAFE_INT:
            return str(value)
        raise _NotPlain
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if kind is list or kind is tuple:
        return "[" + ",".join([_plain(item) for item in value]) + "]"
    raise _NotPlain


def encode_fields(fields: Sequence[str]) -> bytes:
    """Each field as UTF-8 preceded by its byte length (4-byte big-endian unsigned)."""
    if NATIVE is not None and (native := NATIVE.encode_fields(fields)) is not None:
        return bytes(native)
    parts: list[bytes] = []
    try:
        for text in fields:
            if type(text) is not str:
                break
            raw = text.encode("utf-8")
            parts += (len(raw).to_bytes(4, "big"), raw)
        else:
            return b"".join(parts)
    except (UnicodeEncodeError, OverflowError):
        pass
    parts = []  # a field is not a valid string: the checked loop names the first bad one
    for index, text in enumerate(fields):
        if not isinstance(text, str):
            raise DefinitionError(f"a key field is a string, not {type(text).__name__}")
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DefinitionError("key field is not valid Unicode", f"fields[{index}]") from exc
        if len(raw) > _MAX_FIELD_BYTES:
            raise DefinitionError("key field too long", f"fields[{index}]")
        parts.append(len(raw).to_bytes(4, "big"))
        parts.append(raw)
    return b"".join(parts)


def _sha256_hex(fields: Sequence[str]) -> str:
    return hashlib.sha256(encode_fields(fields)).hexdigest()


@dataclass(frozen=True, slots=True)
class EventTrigger:
    """An event's identity: its exact type and the publisher's event id."""

    kind: ClassVar[Literal["event"]] = "event"
    event_type: str
    event_id: str


@dataclass(frozen=True, slots=True)
class InstantTrigger:
    """A poll or schedule fire, identified by its scheduled instant (whole UTC seconds)."""

    kind: Literal["poll", "schedule"]
    scheduled_at: datetime

    def __post_init__(self) -> None:
        if self.kind not in ("poll", "schedule"):
            raise DefinitionError(f"instant trigger kind {self.kind!r}", "trigger.kind")
        if self.scheduled_at.tzinfo is None or self.scheduled_at.utcoffset() is None:
            raise DefinitionError("scheduled instant must be aware", "trigger.scheduled_at")


@dataclass(frozen=True, slots=True)
class RequestTrigger:
    """An immediate control-plane verb (``send``, ``prompt``), identified by its request id."""

    kind: ClassVar[Literal["request"]] = "request"
    request_id: str


Trigger = EventTrigger | InstantTrigger | RequestTrigger


def trigger_fields(trigger: Trigger) -> tuple[str, ...]:
    """The trigger kind followed by its identity fields, as they enter the delivery key."""
    if type(trigger) is EventTrigger:  # nearly every trigger: no pattern matching
        return ("event", trigger.event_type, trigger.event_id)
    match trigger:
        case EventTrigger(event_type=event_type, event_id=event_id):
            return ("event", event_type, event_id)
        case InstantTrigger(kind=kind, scheduled_at=scheduled_at):
            return (kind, rfc3339_seconds(scheduled_at))
        case RequestTrigger(request_id=request_id):
            return ("request", request_id)
    raise DefinitionError(f"unknown trigger {type(trigger).__name__}", "trigger")


def delivery_key(
    *,
    tenant_id: str,
    user_id: str,
    watcher_id: str,
    watcher_version: int,
    source_id: str,
    trigger: Trigger,
) -> str:
    """Delivery key v1 (DESIGN.md §8): lowercase hex SHA-256 of the length-prefixed fields."""
    prefix = delivery_key_prefix(
        tenant_id=tenant_id,
        user_id=user_id,
        watcher_id=watcher_id,
        watcher_version=watcher_version,
        source_id=source_id,
    )
    return delivery_key_from(prefix, trigger)


def delivery_key_prefix(
    *, tenant_id: str, user_id: str, watcher_id: str, watcher_version: int, source_id: str
) -> bytes:
    """The encoded fields of delivery key v1 that one watcher version fixes, so a caller that
    keys many triggers for it encodes them once (:func:`delivery_key_from`)."""
    if isinstance(watcher_version, bool) or not isinstance(watcher_version, int):
        raise DefinitionError("watcher version is an integer", "watcher_version")
    if watcher_version < 0:
        raise DefinitionError("watcher version is not negative", "watcher_version")
    return encode_fields(
        (DELIVERY_KEY_V1, tenant_id, user_id, watcher_id, str(watcher_version), source_id)
    )


def delivery_key_from(prefix: bytes, trigger: Trigger) -> str:
    """Delivery key v1 of ``trigger`` for the watcher version whose ``prefix`` this is."""
    if NATIVE is not None:
        native: str | None = NATIVE.delivery_key_from(prefix, trigger_fields(trigger))
        if native is not None:
            return native
    return hashlib.sha256(prefix + encode_fields(trigger_fields(trigger))).hexdigest()


def request_delivery_key(*, tenant_id: str, user_id: str, verb: str, request_id: str) -> str:
    """The key of an immediate verb: watcher ``verb:<verb>``, version 0, source ``control``."""
    return delivery_key(
        tenant_id=tenant_id,
        user_id=user_id,
        watcher_id=f"verb:{verb}",
        watcher_version=0,
        source_id="control",
        trigger=RequestTrigger(request_id),
    )


def check_delivery_key(value: object, field: str = "delivery_key") -> str:
    """``value`` if it is a delivery key (64 lowercase hex characters), else a refusal."""
    if not isinstance(value, str) or len(value) != 64 or _HEX_KEY.fullmatch(value) is None:
        raise DefinitionError("a delivery key is 64 lowercase hex characters", field)
    return value


def derived_delivery_key(parent_key: str, step: str) -> str:
    """A key derived from another for a follow-up of one delivery (a prompt's ``send``, a
    notification's ``wake``): hex SHA-256 of length-prefixed ``"vigil.derived.v1"``,
    ``parent_key``, ``step``. Deterministic, so a retried parent derives the same follow-up
    and the follow-up dedupes like any outbox entry; the prefix keeps it disjoint from v1 keys.
    """
    check_delivery_key(parent_key, "parent_key")
    if not isinstance(step, str) or not step:
        raise DefinitionError("a derived key needs a step name", "step")
    return _sha256_hex((DERIVED_KEY_V1, parent_key, step))


def evidence_digest(evidence: Mapping[str, Any]) -> str:
    """Evidence digest v1: hex SHA-256 of the RFC 8785 JSON of exactly the nine fields of
    DESIGN.md §10 (absent ones as ``None``). Instants may be given as aware datetimes, which
    are written as RFC 3339 UTC with microseconds, or already as that text.
    """
    if evidence.keys() != EVIDENCE_FIELDS:
        names = set(evidence)
        if missing := sorted(EVIDENCE_FIELDS - names):
            raise DefinitionError("evidence field is missing", f"evidence.{missing[0]}")
        extra = sorted(map(str, names - EVIDENCE_FIELDS))
        raise DefinitionError("evidence field is not part of digest v1", f"evidence.{extra[0]}")
    record = evidence
    for name in _INSTANT_FIELDS:
        if isinstance(record[name], datetime):
            record = {**record, name: rfc3339_micros(record[name])}
    return hashlib.sha256(canonical_json(record, "evidence")).hexdigest()


def evidence_digest_of(
    source_kind: str,
    source_id: str,
    event_type: str | None,
    event_id: str | None,
    envelope_id: str | None,
    cursor: str | None,
    observed_at: str,
    scheduled_at: str | None,
    payload: Any,
) -> str:
    """:func:`evidence_digest` of the nine fields given one by one, instants as RFC 3339 text:
    the same digest, written without building and sorting the outer object (once per input on
    the evaluator's hot path). Anything outside the plain subset goes the general way."""
    if NATIVE is not None:
        fields = (source_kind, source_id, event_type, event_id, envelope_id, cursor)
        native: str | None = NATIVE.evidence_digest_of(*fields, observed_at, scheduled_at, payload)
        if native is not None:
            return native
    given: tuple[Any, ...] = (cursor, envelope_id, event_id, event_type, observed_at)
    given += (payload, scheduled_at, source_id, source_kind)  # in _DIGEST_ORDER
    q = _quote  # text fields are strings or None nearly always: written without _plain's walk
    try:
        members = [
            name + (q(value) if type(value) is str else _plain(value))
            for name, value in zip(_DIGEST_NAMES, given, strict=True)
        ]
        text = ("{" + ",".join(members) + "}").encode("utf-8")
    except (_NotPlain, RecursionError, UnicodeEncodeError, TypeError):
        return evidence_digest(dict(zip(_DIGEST_ORDER, given, strict=True)))
    return hashlib.sha256(text).hexdigest()


def subject_key(tenant_id: str, user_id: str) -> str:
    """The record key of a subject: the RFC 8785 JSON array ``["<tenant>","<user>"]``."""
    return canonical_json([tenant_id, user_id], "subject").decode("utf-8")


def watcher_key(tenant_id: str, user_id: str, watcher_id: str) -> str:
    """The record key of a watcher: ``["<tenant>","<user>","<watcher_id>"]``."""
    return canonical_json([tenant_id, user_id, watcher_id], "watcher").decode("utf-8")


def subject_of(watcher_key: str) -> str:
    """The subject key ``["t","u"]`` of a canonical watcher key ``["t","u","w"]``.

    Ids are restricted to charsets without quotes or commas, so the last comma separates.
    """
    return watcher_key.rsplit(",", 1)[0] + "]"


def _parse_key_array(text: str, size: int, field: str) -> tuple[str, ...]:
    """Accept only the canonical spelling, so one key never has two forms."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise DefinitionError("not a JSON array key", field) from exc
    if (
        not isinstance(value, list)
        or len(value) != size
        or not all(isinstance(part, str) for part in value)
    ):
        raise DefinitionError(f"a key is a JSON array of {size} strings", field)
    if canonical_json(value, field).decode("utf-8") != text:
        raise DefinitionError("key is not in RFC 8785 canonical form", field)
    return tuple(value)


def parse_subject_key(text: str) -> tuple[str, str]:
    tenant_id, user_id = _parse_key_array(text, 2, "subject_key")
    return tenant_id, user_id


def parse_watcher_key(text: str) -> tuple[str, str, str]:
    tenant_id, user_id, watcher_id = _parse_key_array(text, 3, "watcher_key")
    return tenant_id, user_id, watcher_id
