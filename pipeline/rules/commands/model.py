"""The models of the control plane: commands, their results, registry entries and grants.

Owns :class:`Command` (verb, principal, subject, request id), :class:`CommandResult` (ok with a
view, or a :class:`ResultCode`), :class:`RegistryEntry`, stored grants, :class:`CommandOutcome` (one
command's effects) and the JSON views ``show``/``list`` return. What a command does is ``apply``;
the records on the wire are ``pipeline.records``."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pipeline.rules.authz import Action, Grant, Principal
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import Instant, rfc3339_micros
from pipeline.rules.keys import canonical_json, subject_key
from pipeline.rules.lifecycle import CloseReason, WatcherStatus
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.sources import PollingSource, checked_ref

__all__ = [
    "Command",
    "CommandError",
    "CommandOutcome",
    "CommandResult",
    "CommandVerb",
    "GrantRecord",
    "GrantScope",
    "GrantSpec",
    "LifecycleChange",
    "Redelivery",
    "RegistryEntry",
    "ResultCode",
    "Shred",
    "WatcherWrite",
    "fingerprint",
    "grant_id_for",
    "grant_scope",
    "grant_view",
    "watcher_view",
]

# Grants name sources, targets and tools; a pinned tool key carries its version (``x@v1``).
_GRANT_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@\-]*")
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}")
_DELIVERY_KEY = re.compile(r"[0-9a-f]{64}")


class CommandVerb(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    PROPOSE = "propose"
    APPROVE = "approve"
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    CLOSE = "close"
    ERASE = "erase"
    SHOW = "show"
    LIST = "list"
    GRANT_ADD = "grant_add"
    GRANT_REVOKE = "grant_revoke"
    GRANT_LIST = "grant_list"
    SEND = "send"
    SCHEDULE = "schedule"  # a control-plane schedule: created; a live name is a conflict
    SCHEDULE_UPDATE = "schedule_update"  # seed 001's --update: replaced or created, no revision
    RUN = "run"  # the daemon's verbs, authorized here before they run: nothing is written
    QUERY = "query"
    PROMPT = "prompt"  # the agent step of an immediate prompt
    KEY = "key"  # make sure the subject has a data key (before a sealed command, §10)
    REDELIVER = "redeliver"  # send a dead-lettered or suppressed delivery again (same key)
    REPLAY_APPLY = "replay_apply"  # an operator's replay --apply: authorized and audited here
    EXPORT = "export"  # one page of a subject's watchers, as an export file lists them
    IMPORT = "import"  # one exported watcher, kept as it was (another deployment's)


class ResultCode(StrEnum):
    """Why a command was refused (DESIGN.md §9's API error codes)."""

    INVALID = "invalid"
    DENIED = "denied"
    NOT_FOUND = "not_found"  # also for another tenant's or user's objects
    CONFLICT = "conflict"
    STALE_REVISION = "stale_revision"
    CAP_REACHED = "cap_reached"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GrantSpec(_Model):
    """What ``vigil grant add`` asks for: a subject, a purpose, sources, tools, targets, actions."""

    tenant_id: str
    user_id: str
    purpose: str
    sources: tuple[str, ...] = Field(min_length=1)
    tools: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    actions: tuple[Action, ...] = Field(min_length=1)
    until: Instant  # aware, in years 1970..9999 (DESIGN.md §10)

    @field_validator("tenant_id", "user_id", "purpose")
    @classmethod
    def _ref(cls, value: str, info: Any) -> str:
        return checked_ref(value, str(info.field_name))

    @field_validator("sources", "tools", "targets")
    @classmethod
    def _refs(cls, value: tuple[str, ...], info: Any) -> tuple[str, ...]:
        for item in value:
            checked_ref(item, str(info.field_name), _GRANT_REF)
        return tuple(sorted(set(value)))


class Command(_Model):
    """One command as the authenticated edge asserts it. ``tenant_id``/``user_id`` name the
    subject it is about (its record key); the principal may be an operator acting for it."""

    request_id: str
    verb: CommandVerb
    principal: Principal
    tenant_id: str
    user_id: str
    issued_at: datetime
    watcher_id: str | None = None
    version: int | None = Field(default=None, ge=1)
    expected_revision: int | None = Field(default=None, ge=0)
    definition: dict[str, Any] | None = None
    reason: CloseReason | None = None
    grant: GrantSpec | None = None
    grant_id: str | None = None
    source_id: str | None = None
    state: WatcherStatus | None = None
    session_id: str | None = None
    target: str | None = None
    text: str | None = None
    answer_to: str | None = None
    delivery_key: str | None = None
    offset: int | None = Field(default=None, ge=0, le=2**31)  # list: one page of the matches
    limit: int | None = Field(default=None, ge=0, le=10_000)

    @field_validator("delivery_key")
    @classmethod
    def _delivery_key(cls, value: str | None) -> str | None:
        if value is not None and _DELIVERY_KEY.fullmatch(value) is None:
            raise ValueError("a delivery key is 64 lowercase hex characters")
        return value

    @field_validator("request_id", "answer_to")
    @classmethod
    def _request_id(cls, value: str | None) -> str | None:
        if value is not None and _REQUEST_ID.fullmatch(value) is None:
            raise ValueError("a request id is 1..128 of letters, digits and . _ : -")
        return value

    @property
    def subject_key(self) -> str:
        return subject_key(self.tenant_id, self.user_id)


class CommandError(_Model):
    code: ResultCode
    message: str
    field: str | None = None


class CommandResult(_Model):
    """The answer to one command, keyed by its request id on ``command-results``."""

    request_id: str
    verb: str
    ok: bool
    error: CommandError | None = None
    result: dict[str, Any] | None = None
    processed_at: datetime

    def as_json(self) -> dict[str, Any]:
        """The object ``--json`` prints: the result, or ``{"error": {code, message, field}}``."""
        if self.error is not None:
            return {"error": self.error.model_dump(mode="json")}
        return dict(self.result or {})


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """The command processor's record of one watcher: what caps, CAS and collapse decide on."""

    tenant_id: str
    user_id: str
    watcher_id: str
    version: int
    revision: int
    status: WatcherStatus
    source_id: str
    session_id: str | None
    fingerprint: str
    created_at: datetime
    updated_at: datetime
    definition_json: str
    activated_at: datetime | None = None
    closed_reason: CloseReason | None = None

    def definition(self) -> WatcherDefinition:
        return _parse_definition(self.definition_json)


@lru_cache(maxsize=4096)
def _parse_definition(text: str) -> WatcherDefinition:
    """A stored version; one this build's rules no longer accept is a :class:`DefinitionError`
    (refused like any invalid input), never a crash that would stall the partition."""
    try:
        return WatcherDefinition.model_validate_json(text)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or None
        raise DefinitionError(f"stored definition: {error['msg']}", where) from None


@dataclass(frozen=True, slots=True)
class GrantScope:
    """What a grant must name for a stored watcher (``authz.authorize``'s fields)."""

    purpose: str
    source_id: str
    tool: str | None
    target: str


@lru_cache(maxsize=32_768)
def grant_scope(definition_json: str) -> GrantScope | None:
    """The grant scope of a stored definition (None when it no longer validates). Cached by
    its text, far more entries than parsed definitions: listing a subject's 10,000 watchers
    checks every one against the grants without parsing them again."""
    try:
        definition = _parse_definition(definition_json)
    except DefinitionError:
        return None
    source = definition.source
    tool = source.governed_tool if isinstance(source, PollingSource) else None
    return GrantScope(definition.purpose, definition.source_id, tool, definition.delivery.target)


@dataclass(frozen=True, slots=True)
class GrantRecord:
    """A stored grant: the authz :class:`Grant` plus who added it and when."""

    grant: Grant
    created_at: datetime
    created_by: str


@dataclass(frozen=True, slots=True)
class WatcherWrite:
    """A ``watchers`` record (partitioned by ``source_id``); ``entry`` None is a tombstone."""

    watcher_id: str
    source_id: str
    entry: RegistryEntry | None


@dataclass(frozen=True, slots=True)
class LifecycleChange:
    """A ``lifecycle`` record: a watcher's state, a tombstone, or (``watcher_id`` None) a
    subject-wide erasure."""

    watcher_id: str | None
    status: str
    version: int = 0
    revision: int = 0
    reason: CloseReason | None = None
    tombstone: bool = False


@dataclass(frozen=True, slots=True)
class Shred:
    """Data keys to tombstone (DESIGN.md §10): ``watcher_id`` None shreds every key of the
    subject (erasure); otherwise every evidence key of that watcher's versions (cancel)."""

    watcher_id: str | None = None


@dataclass(frozen=True, slots=True)
class Redelivery:
    """A ``redeliveries`` record: send ``delivery_key`` again if delivery holds it dead-lettered
    or suppressed for this subject (delivery decides; anything else is ignored there)."""

    delivery_key: str
    tenant_id: str
    user_id: str
    request_id: str
    requested_at: datetime


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    """Everything one command writes, in one transaction with its input offset. Data keys the
    writes need (the subject's, each new watcher version's) are the processor's to make."""

    result: CommandResult
    registry: tuple[tuple[str, RegistryEntry | None], ...] = ()
    watchers: tuple[WatcherWrite, ...] = ()
    lifecycle: tuple[LifecycleChange, ...] = ()
    definitions: tuple[RegistryEntry, ...] = ()
    grants: tuple[tuple[str, GrantRecord | None], ...] = ()
    outbox: tuple[OutboxEntry, ...] = ()
    shred: tuple[Shred, ...] = ()
    redeliveries: tuple[Redelivery, ...] = ()
    note: str | None = None  # ``definitions`` are audit records saying this (no new version)


def watcher_view(entry: RegistryEntry) -> dict[str, Any]:
    """What ``show`` and ``list`` return for one watcher (JSON)."""

    def instant(value: datetime | None) -> str | None:
        return None if value is None else rfc3339_micros(value)

    return {
        "tenant_id": entry.tenant_id,
        "user_id": entry.user_id,
        "watcher_id": entry.watcher_id,
        "version": entry.version,
        "revision": entry.revision,
        "status": entry.status.value,
        "source_id": entry.source_id,
        "session_id": entry.session_id,
        "created_at": instant(entry.created_at),
        "updated_at": instant(entry.updated_at),
        "activated_at": instant(entry.activated_at),
        "closed_reason": None if entry.closed_reason is None else entry.closed_reason.value,
        "definition": json.loads(entry.definition_json),
    }


def grant_view(record: GrantRecord) -> dict[str, Any]:
    body: dict[str, Any] = record.grant.model_dump(mode="json")
    for name in ("sources", "tools", "targets", "actions"):
        body[name] = sorted(body[name])
    body["until"] = rfc3339_micros(record.grant.until)
    body["created_at"] = rfc3339_micros(record.created_at)
    body["created_by"] = record.created_by
    return body


def grant_id_for(request_id: str) -> str:
    """A grant's id, derived from the request that added it: a retried add is the same grant."""
    return "g-" + hashlib.sha256(request_id.encode("utf-8")).hexdigest()[:16]


# --- watcher verbs --------------------------------------------------------------------------


def fingerprint(definition: WatcherDefinition) -> str:
    """What makes two watches of one subject identical: everything but id and version."""
    body = definition.to_json()
    for name in ("watcher_id", "version"):
        body.pop(name, None)
    return hashlib.sha256(canonical_json(body, "definition")).hexdigest()
