"""The HTTP API's bodies: what callers send and what they get back (DESIGN.md §9).

Owns the pydantic models the OpenAPI document is generated from. Request bodies say the shape only
and leave every rule to the command processor, so governance never differs between transports;
responses mirror the processor's views and the receipt and notification records. Left out: routing
and authentication (``api``, ``auth``) and the Kafka reads (``backend``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from pipeline.rules.authz import Action
from pipeline.rules.definition_schema import field_schemas
from pipeline.rules.lifecycle import WatcherStatus

__all__ = [
    "REF_PATTERN",
    "AckView",
    "ErrorBody",
    "ErrorDetail",
    "Evaluation",
    "EvaluationList",
    "GrantBody",
    "GrantList",
    "GrantView",
    "Health",
    "NotificationList",
    "NotificationView",
    "RevokeView",
    "ScheduleCancelled",
    "ScheduleList",
    "WatchBody",
    "WatchList",
    "WatchUpdate",
    "WatchView",
]

REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,199}$"
"""Ids in paths and queries: watcher ids (``schedule:<chat>:<name>`` included), tenants, users."""

Ref = Annotated[str, Field(pattern=REF_PATTERN)]


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class ErrorDetail(_View):
    code: Literal[
        "invalid",
        "protocol_version",
        "unauthenticated",
        "denied",
        "not_found",
        "conflict",
        "stale_revision",
        "cap_reached",
        "too_large",
        "unavailable",
    ]
    message: str
    field: str | None = None


class ErrorBody(_View):
    """Every refusal: ``{"error": {"code", "message", "field"}}``."""

    error: ErrorDetail


# --- watches -----------------------------------------------------------------------------

_AGENT_WATCH: dict[str, Any] = {
    "watcher_id": "run-r-81-done",
    "purpose": "agent.watch",
    "mode": "once",
    "source": {
        "kind": "polling",
        "source_id": "run:r-0",
        "tool": "workflow.run.status@v1",
        "target": "r-0",
        "cadence": "5m",
        "max_age": "2m",
    },
    "condition": {"eq": ["status", "succeeded"]},
    "terminal_condition": {"eq": ["status", "failed"]},
    "delivery": {"target": "in-app", "wake_session": True},
    "window": "1h",
    "session_id": "s-1",
}
_GRANT: dict[str, Any] = {
    "tenant_id": "acme",
    "user_id": "u-1",
    "purpose": "agent.watch",
    "sources": ["run:r-0"],
    "tools": ["workflow.run.status@v1"],
    "targets": ["in-app"],
    "actions": ["propose", "approve", "manage"],
    "until": "2030-01-01T00:00:00Z",
}


_FIELD_SCHEMAS: Final = field_schemas()
# The definition's parts as the OpenAPI document describes them (generated from the rules'
# models); the bodies stay plain JSON here, the command processor validates them.
_SourceJson = Annotated[dict[str, Any], WithJsonSchema(_FIELD_SCHEMAS["source"])]
_ConditionJson = Annotated[dict[str, Any], WithJsonSchema(_FIELD_SCHEMAS["condition"])]
_TerminalConditionJson = Annotated[
    dict[str, Any], WithJsonSchema(_FIELD_SCHEMAS["terminal_condition"])
]
_DeliveryJson = Annotated[dict[str, Any], WithJsonSchema(_FIELD_SCHEMAS["delivery"])]
_WindowJson = Annotated[str, WithJsonSchema(_FIELD_SCHEMAS["window"])]
_BudgetsJson = Annotated[dict[str, Any], WithJsonSchema(_FIELD_SCHEMAS["budgets"])]
_RetryJson = Annotated[dict[str, Any], WithJsonSchema(_FIELD_SCHEMAS["retry"])]
_PrivacyJson = Annotated[dict[str, Any], WithJsonSchema(_FIELD_SCHEMAS["privacy"])]
_ChangeJson = Annotated[dict[str, Any], WithJsonSchema(_FIELD_SCHEMAS["change"])]


class WatchBody(_Body):
    """A watcher definition (docs/definitions.md; its JSON Schema is docs/schemas/watcher.json).
    An agent watch is ``mode: once`` with a pinned evaluator tool, a ``terminal_condition``, a
    ``window`` and a ``session_id`` (an agent's own session when left out); every proposal is
    one, whatever the body leaves out. The command processor validates it."""

    model_config = ConfigDict(json_schema_extra={"examples": [_AGENT_WATCH]})

    watcher_id: str | None = Field(
        default=None, description="Required to create; a proposal without one gets one."
    )
    purpose: str
    mode: Literal["every", "once", "change"] | None = None
    change: _ChangeJson | None = None
    source: _SourceJson
    condition: _ConditionJson | None = None
    terminal_condition: _TerminalConditionJson | None = None
    delivery: _DeliveryJson
    expires_at: str | None = None
    window: _WindowJson | None = None
    session_id: str | None = None
    budgets: _BudgetsJson | None = None
    retry: _RetryJson | None = None
    privacy: _PrivacyJson | None = None

    def definition(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class WatchUpdate(WatchBody):
    """A new version of a live watcher, and the revision its writer read (or ``If-Match``)."""

    expected_revision: int | None = Field(default=None, ge=0, le=2**63 - 1)

    def definition(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True, exclude={"expected_revision"})


class WatchView(_View):
    tenant_id: str
    user_id: str
    watcher_id: str
    version: int
    revision: int
    status: WatcherStatus
    source_id: str
    session_id: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    activated_at: str | None = None
    closed_reason: str | None = None
    definition: dict[str, Any]
    collapsed: bool = Field(
        default=False, description="True when an identical live watch already existed."
    )


class WatchList(_View):
    watchers: list[WatchView]


class Evaluation(_View):
    """One receipt: what was decided, why, on which evidence (privacy-filtered)."""

    watcher_id: str
    watcher_version: int
    source_id: str
    evaluated_at: str
    outcome: str
    reason: str
    evidence_digest: str
    trigger: dict[str, Any]
    trigger_key: str
    observed_at: str
    authorized: bool | None = None
    authorization: str = ""
    budget: str | None = None
    tool_error: str | None = None
    payload: dict[str, Any] | None = None
    delivery_key: str | None = None
    note: str = ""


class EvaluationList(_View):
    evaluations: list[Evaluation]
    erased: int = Field(
        default=0,
        description="Receipts left out because their data key was shredded (cancel, erasure).",
    )


# --- the in-app ledger -------------------------------------------------------------------


class NotificationView(_View):
    delivery_key: str
    watcher_id: str
    session_id: str | None = None
    outcome: str | None = None
    verb: str | None = None
    text: str | None = None
    trigger: dict[str, Any] | None = None
    evidence_digest: str | None = None
    due_at: str | None = None
    late: bool = False
    created_at: str
    acked_at: str | None = None


class NotificationList(_View):
    notifications: list[NotificationView]
    erased: int = Field(
        default=0, description="Notifications left out because the subject's key was shredded."
    )


class AckView(_View):
    delivery_key: str
    acked_at: str
    already: bool = Field(description="True when it had been acknowledged before.")


# --- deliveries --------------------------------------------------------------------------


class DeliveryView(_View):
    """One delivery as ``delivery-state`` holds it: categorical codes only, never a body."""

    delivery_key: str
    tenant_id: str
    user_id: str
    watcher_id: str
    watcher_version: int
    target: str
    state: Literal["pending", "dispatching", "delivered", "dead_letter", "suppressed", "cancelled"]
    attempts: int = Field(description="Attempts in the current round (a redelivery restarts it).")
    redeliveries: int = Field(description="Redeliver commands applied to this key.")
    next_attempt_at: str | None = Field(description="When a pending delivery is tried next.")
    reason: str | None = Field(
        description="Why it waits or was suppressed (a reason code: docs/reason-codes.md)."
    )
    detail: str | None = Field(description="A categorical detail of the reason.")
    last_error: str | None = Field(
        description="The receiver's last answer as a categorical code (http_410, timeout, …)."
    )
    created_at: str | None
    updated_at: str | None
    delivered_at: str | None
    settled_at: str | None
    redeliverable: bool = Field(description="Dead-lettered or suppressed: redeliver applies.")


class DeliveryList(_View):
    deliveries: list[DeliveryView]


class RedeliverView(_View):
    delivery_key: str
    tenant_id: str
    user_id: str
    requested: bool = Field(
        description="The command processor accepted the request; delivery sends the entry "
        "again if it is dead-lettered or suppressed (same key, fresh attempt count)."
    )


# --- grants ------------------------------------------------------------------------------


class GrantBody(_Body):
    """A grant (operators): a subject, a purpose, sources, and what it allows until when."""

    model_config = ConfigDict(json_schema_extra={"examples": [_GRANT]})

    tenant_id: str
    user_id: str
    purpose: str
    sources: list[str] = Field(min_length=1)
    tools: list[str] = []
    targets: list[str] = []
    actions: list[Action] = Field(min_length=1)
    until: datetime


class GrantView(_View):
    grant_id: str
    tenant_id: str
    user_id: str
    purpose: str
    sources: list[str]
    tools: list[str]
    targets: list[str]
    actions: list[str]
    until: str
    created_at: str
    created_by: str


class GrantList(_View):
    grants: list[GrantView]


class RevokeView(_View):
    revoked: list[str]
    narrowed: list[str]


# --- schedules and probes ----------------------------------------------------------------


class ScheduleList(_View):
    chat: str
    schedules: list[dict[str, Any]]


class ScheduleCancelled(_View):
    chat: str
    name: str
    cancelled: bool


class Health(_View):
    status: Literal["ok", "ready"]
