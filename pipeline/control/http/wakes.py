"""``GET /v1/ledger/wakes``: the caller's wakes as server-sent events (seed 003).

Owns the route and its SSE framing: after authentication and the ledger's own checks
(``ledger.own_ledger``: role and grant), one ``wake`` event per wake of the caller's own subject
(``id`` the position, ``data.session_id``) and heartbeat comments; at most ``streams`` open and
``per_principal`` per caller (``cap_reached``), ended after ``idle_s`` without a wake
(``Last-Event-ID`` resumes). Left out: reading (``wake_reader``) and the ledger (``ledger``)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Final

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.common import Caller, Services, documented
from pipeline.control.http.ledger import own_ledger
from pipeline.control.http.models import REF_PATTERN
from pipeline.control.http.wake_reader import StreamSlots, WakeFollower
from pipeline.rules.errors import BrokerError

__all__ = ["router"]

router = APIRouter()

_POLL_S: Final = 0.5
_SSE: Final = "text/event-stream"


@router.get(
    "/v1/ledger/wakes",
    response_class=StreamingResponse,
    responses={
        **documented(403, 409, 503),
        200: {
            "content": {_SSE: {"schema": {"type": "string"}}},
            "description": "Server-sent events: `event: wake`, `id: <position>`, "
            '`data: {"session_id": …, "position": "notifications:<p>:<offset>"}`; '
            "comment lines are heartbeats. Reread GET /v1/notifications on each wake.",
        },
    },
    summary="The caller's wakes as server-sent events (content-free: session and position)",
)
async def wakes(
    request: Request,
    who: Caller,
    services: Services,
    session_id: Annotated[
        str | None, Query(pattern=REF_PATTERN, description="Only this session's wakes.")
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(max_length=64, description="Resume after this position (SSE reconnect)."),
    ] = None,
) -> StreamingResponse:
    tenant, user = await run_in_threadpool(own_ledger, services, who)
    source = services.wakes
    if source is None:
        raise ApiError(ApiCode.UNAVAILABLE, "this API serves no wake stream")
    slots = services.wake_slots
    if not slots.acquire(who.name):
        raise ApiError(ApiCode.CAP_REACHED, "too many open wake streams: close one first")
    try:
        follower = await run_in_threadpool(source.follow, tenant, user, last_event_id)
    except BrokerError as exc:
        slots.release(who.name)
        raise ApiError(ApiCode.UNAVAILABLE, f"the ledger cannot be followed: {exc}") from None
    stream = _events(request, follower, slots, who.name, session_id)
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream, media_type=_SSE, headers=headers)


async def _events(
    request: Request,
    follower: WakeFollower,
    slots: StreamSlots,
    name: str,
    session_id: str | None,
) -> AsyncIterator[str]:
    limits = slots.limits
    try:
        yield "retry: 5000\n\n"
        now = time.monotonic()
        idle_until, beat_at = now + limits.idle_s, now + limits.heartbeat_s
        while not await request.is_disconnected():
            try:
                found = await run_in_threadpool(follower.poll, _POLL_S)
            except BrokerError:
                yield ": the ledger is unavailable: reconnect with Last-Event-ID\n\n"
                return
            now = time.monotonic()
            for wake in found:
                if session_id is not None and wake.session_id != session_id:
                    continue
                data = json.dumps({"session_id": wake.session_id, "position": wake.position})
                yield f"event: wake\nid: {wake.position}\ndata: {data}\n\n"
                idle_until = now + limits.idle_s
            if now >= idle_until:
                yield ": idle: reconnect with Last-Event-ID\n\n"
                return
            if now >= beat_at:
                yield ": heartbeat\n\n"
                beat_at = now + limits.heartbeat_s
    finally:
        follower.close()
        slots.release(name)
