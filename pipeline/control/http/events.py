"""``POST /v1/events``: publishers put events on ``events`` over HTTP (DESIGN.md §9).

Only a ``publisher`` principal, for its listed sources (else 403 ``denied``); ``{"events": [...]}``
of 1 to :data:`MAX_BATCH`, each answered in order ``accepted`` or ``rejected`` with a code and
message. Accepted events carry the principal's tenant, never the payload's, are encoded as the SDK
does and acknowledged before the answer (else 503 ``unavailable``; a retry dedupes). Left out: the
SDK (``producers.publish``) and authentication (``auth``)."""

from datetime import datetime
from typing import Any, Final, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.common import Caller, Services, documented
from pipeline.records.event import EventLine, event_line
from pipeline.rules.authz import Role
from pipeline.rules.errors import BrokerError, DefinitionError

__all__ = ["MAX_BATCH", "router"]

MAX_BATCH: Final = 500
_ECHO_MAX: Final = 256  # an event id longer than any valid one is not echoed back

router = APIRouter()


class EventBatch(BaseModel):
    """A batch of events, each in the shape `vigil publish` reads; each is checked on its own."""

    model_config = ConfigDict(extra="forbid")

    events: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_BATCH)


class EventAnswer(BaseModel):
    index: int
    event_id: str | None = None
    status: Literal["accepted", "rejected"]
    code: Literal["invalid", "denied"] | None = None
    message: str | None = None
    field: str | None = None


class EventAnswers(BaseModel):
    accepted: int
    rejected: int
    results: list[EventAnswer]


@router.post(
    "/v1/events",
    response_model=EventAnswers,
    responses=documented(403),
    summary="Publish a batch of events (publishers, for their sources)",
)
def publish_events(body: EventBatch, who: Caller, services: Services) -> EventAnswers:
    if who.role is not Role.PUBLISHER or services.events is None:
        raise ApiError(ApiCode.DENIED, "only a publisher principal may publish events")
    scope = services.publishers.get(who.name, frozenset())
    answers: list[EventAnswer | None] = []
    accepted: list[tuple[int, tuple[EventLine, datetime]]] = []
    for index, item in enumerate(body.events):
        event_id = _echo(item.get("event_id"))
        try:
            parsed = event_line(item)
        except DefinitionError as exc:
            answers.append(_rejected(index, event_id, "invalid", exc.message, exc.field))
            continue
        if parsed[0].source_id not in scope:
            message = f"source {parsed[0].source_id!r} is not one this publisher may publish"
            answers.append(_rejected(index, event_id, "denied", message, "source_id"))
            continue
        answers.append(None)
        accepted.append((index, parsed))
    try:
        events = [event for _, event in accepted]
        verdicts = services.events.publish(events, who.tenant_id) if accepted else []
    except BrokerError as exc:
        raise ApiError(ApiCode.UNAVAILABLE, f"events not acknowledged: {exc}") from None
    for (index, (line, _)), problem in zip(accepted, verdicts, strict=True):
        answers[index] = (
            EventAnswer(index=index, event_id=line.event_id, status="accepted")
            if problem is None
            else _rejected(index, line.event_id, "invalid", problem, None)
        )
    results = [a for a in answers if a is not None]
    done = sum(1 for a in results if a.status == "accepted")
    return EventAnswers(accepted=done, rejected=len(results) - done, results=results)


def _echo(event_id: object) -> str | None:
    """The event id to answer with: one no valid id could be longer than, or that no JSON
    answer can carry (a lone surrogate), is left out."""
    if not isinstance(event_id, str) or len(event_id) > _ECHO_MAX:
        return None
    try:
        event_id.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return event_id


def _rejected(
    index: int,
    event_id: str | None,
    code: Literal["invalid", "denied"],
    message: str,
    field: str | None,
) -> EventAnswer:
    return EventAnswer(
        index=index,
        event_id=_echo(event_id),
        status="rejected",
        code=code,
        message=message,
        field=field,
    )
