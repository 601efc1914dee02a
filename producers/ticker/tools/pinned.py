"""The pinned evaluators of agent watches: ``workflow.run.status@v1`` and
``agent.session.state@v1`` (seed 003), over the latest state of one run or one session.

Owns :class:`PinnedEvaluator`, :class:`PinnedSpec`, :func:`state_from_event` and the
:class:`StateLookup` protocol. Leaves out the table itself (``producers.ticker.pinned_states``
holds it) and the condition (the watcher's own, ``pipeline.rules.evaluation``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

from pipeline.records.ticker_state import PinnedState
from pipeline.rules.outcomes import ErrorCode
from pipeline.rules.pinned import REGISTERED
from producers.ticker.tools.base import ToolRequest, ToolResult

__all__ = [
    "AGENT_SESSION",
    "PINNED",
    "WORKFLOW_RUN",
    "PinnedEvaluator",
    "PinnedSpec",
    "StateLookup",
    "state_from_event",
]

_MAX_ID: Final = 200


@dataclass(frozen=True, slots=True)
class PinnedSpec:
    """One pinned evaluator: its tool key, the event type that feeds it, and its fields."""

    tool: str
    event_type: str
    id_field: str
    state_field: str
    source_prefix: str
    owning_session: bool  # the target must be the watch's own session


WORKFLOW_RUN: Final = PinnedSpec(
    tool="workflow.run.status@v1",
    event_type="workflow.run.status",
    id_field="run_id",
    state_field=REGISTERED["workflow.run.status@v1"].field,
    source_prefix="run:",
    owning_session=False,
)
AGENT_SESSION: Final = PinnedSpec(
    tool="agent.session.state@v1",
    event_type="agent.session.state",
    id_field="session_id",
    state_field=REGISTERED["agent.session.state@v1"].field,
    source_prefix="session:",
    owning_session=True,
)
PINNED: Final[Mapping[str, PinnedSpec]] = {s.event_type: s for s in (WORKFLOW_RUN, AGENT_SESSION)}


def _text(value: object) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= _MAX_ID:
        return value
    return None


def state_from_event(
    event_type: str,
    tenant_id: str | None,
    source_id: str,
    event_id: str,
    observed_at: datetime,
    payload: Mapping[str, Any],
) -> PinnedState | None:
    """The state an event of the publisher's ``tenant_id`` (its record's) reports, or ``None``
    when it does not feed a pinned evaluator (another type; no tenant on the record; a payload
    naming another tenant; a missing id or state; a ``source_id`` off the convention)."""
    spec = PINNED.get(event_type)
    if spec is None or tenant_id is None or _text(tenant_id) is None:
        return None
    if payload.get("tenant_id", tenant_id) != tenant_id:
        return None  # the payload claims a tenant its publisher does not belong to
    subject_id = _text(payload.get(spec.id_field))
    if subject_id is None or _text(payload.get(spec.state_field)) is None:
        return None
    if source_id != spec.source_prefix + subject_id:
        return None
    return PinnedState(
        event_type, tenant_id, subject_id, source_id, event_id, observed_at, dict(payload)
    )


class StateLookup(Protocol):
    """Where the evaluators read the latest state (the ticker's ``ticker-state`` table)."""

    def latest(self, event_type: str, tenant_id: str, subject_id: str) -> PinnedState | None: ...


class PinnedEvaluator:
    """A version-pinned evaluator tool over one kind of state.

    Where the state lives: upstream services publish a run's or session's state as ordinary events —
    type ``workflow.run.status`` (``{"run_id", "status", ...}``) or ``agent.session.state``
    (``{"session_id", "state", ...}``), ``source_id`` ``run:<run_id>`` or ``session:<session_id>``.
    The tenant is the event record's own ``tenant_id`` (set by the edge that authenticated the
    publisher), never the payload's; an event without one feeds no evaluator, and a payload naming
    another tenant is no state. The ticker keeps the latest per ``(evaluator, tenant_id, id)`` in
    ``ticker-state``, so a watch, its state events, its ticks and its state live in one partition.

    An evaluator answers the stored payload as the evidence; it looks only inside the watch's own
    tenant and checks the payload's ``user_id``, when it names one, against the watch's (else
    ``rejected``); a watch whose ``source_id`` breaks the convention is ``rejected``. No state yet
    is ``unavailable`` (the next cadence retries).
    """

    def __init__(self, spec: PinnedSpec, lookup: StateLookup) -> None:
        self._spec = spec
        self._lookup = lookup

    @property
    def key(self) -> str:
        return self._spec.tool

    @property
    def timeout(self) -> timedelta:
        return timedelta(seconds=1)  # an in-memory read

    def call(self, request: ToolRequest) -> ToolResult:
        spec = self._spec
        target = request.target
        if target is None or request.source_id != spec.source_prefix + target:
            return ToolResult.failed(ErrorCode.REJECTED)
        if spec.owning_session and target != request.session_id:
            return ToolResult.failed(ErrorCode.REJECTED)
        state = self._lookup.latest(spec.event_type, request.tenant_id, target)
        if state is None or state.tenant_id != request.tenant_id:
            return ToolResult.failed(ErrorCode.UNAVAILABLE)
        if not _same_subject(state.payload, request):
            return ToolResult.failed(ErrorCode.REJECTED)
        return ToolResult.ok(state.payload)


def _same_subject(payload: Mapping[str, Any], request: ToolRequest) -> bool:
    """The payload's own subject, where it names one, is the watch's: its ``tenant_id`` and its
    ``user_id``. Checked on the payload the watch would see, beside the record's tenant the
    state was stored under."""
    if payload.get("tenant_id", request.tenant_id) != request.tenant_id:
        return False
    return "user_id" not in payload or payload["user_id"] == request.user_id
