"""The watch routes and schedules, which are watchers too (DESIGN.md §9's table; seed 003, §10).

Every route asserts the caller on one command and the command processor decides (roles, bounds,
grants, limits, collapse: 200 with the existing watch, 201 a new proposal). An update names the
revision it read (``If-Match`` or ``expected_revision``; stale or missing: 409 ``stale_revision``);
another subject's watch is "not found". Schedules go through the dispatch core. Left out: the caller
and round trip (``common``) and the app (``api``)."""

import re
from typing import Annotated, Any, Final

from fastapi import APIRouter, Header, Path, Query, Response
from fastapi.responses import JSONResponse

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.common import (
    MAX_LONG,
    ApiServices,
    Caller,
    Services,
    TenantQ,
    UserQ,
    documented,
    guarded,
    run_command,
    subject_of,
)
from pipeline.control.http.models import (
    REF_PATTERN,
    EvaluationList,
    ScheduleCancelled,
    ScheduleList,
    WatchBody,
    WatchList,
    WatchUpdate,
    WatchView,
)
from pipeline.control.verbs import NAME_PATTERN, VerbErrorKind
from pipeline.rules.authz import Principal, Role
from pipeline.rules.commands.model import CommandVerb
from pipeline.rules.lifecycle import WatcherStatus

__all__ = ["router", "schedule_verb"]

router = APIRouter()

_ERRORS: Final = documented(403, 404, 409)
_COLLAPSED: Final[dict[int | str, dict[str, Any]]] = {
    200: {"model": WatchView, "description": "An identical live watch: the existing one."}
}
_KIND_CODES: Final[dict[VerbErrorKind, ApiCode]] = {
    VerbErrorKind.INVALID: ApiCode.INVALID,
    VerbErrorKind.DENIED: ApiCode.DENIED,
    VerbErrorKind.NOT_FOUND: ApiCode.NOT_FOUND,
    VerbErrorKind.CONFLICT: ApiCode.CONFLICT,
    VerbErrorKind.UNAUTHENTICATED: ApiCode.UNAUTHENTICATED,
}

WatcherId = Annotated[str, Path(pattern=REF_PATTERN, description="The watcher's id.")]
RevisionQ = Annotated[
    int | None,
    Query(ge=0, le=MAX_LONG, description="Refuse (409 stale_revision) unless at this revision."),
]
ChatQ = Annotated[
    str | None, Query(pattern=REF_PATTERN, description="The chat; default: the only one.")
]
IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        max_length=64,
        description='The revision read (the ETag of GET, e.g. "3"): refused unless current.',
    ),
]
_ETAG = re.compile(r'^(?:W/)?"?([0-9]{1,19})"?$')
_SESSION_BOUND: Final = (Role.AGENT, Role.SCOPED_CHAT)


def _revision(if_match: str | None, expected: int | None) -> int | None:
    """The revision the caller read: ``If-Match`` or ``expected_revision`` (the same if both)."""
    if if_match is None:
        return expected
    found = _ETAG.fullmatch(if_match.strip())
    if found is None or int(found.group(1)) > MAX_LONG:
        raise ApiError(ApiCode.INVALID, 'If-Match is a revision, e.g. "3"', "If-Match")
    revision = int(found.group(1))
    if expected is not None and expected != revision:
        raise ApiError(
            ApiCode.INVALID, "If-Match and expected_revision disagree", "expected_revision"
        )
    return revision


def _tagged(view: dict[str, Any], response: Response) -> WatchView:
    """The watch as answered, its revision in the ``ETag`` header (what ``If-Match`` names)."""
    watch = WatchView.model_validate(view)
    response.headers["ETag"] = f'"{watch.revision}"'
    return watch


@router.post(
    "/v1/watches:propose",
    status_code=201,
    response_model=WatchView,
    responses={**_COLLAPSED, **_ERRORS},
    summary="Propose a watch (state proposed); agents, users, managers",
)
def propose(
    body: WatchBody,
    who: Caller,
    services: Services,
    tenant_id: TenantQ = None,
    user_id: UserQ = None,
) -> JSONResponse:
    definition = body.definition()
    if who.role in (Role.AGENT, Role.SCOPED_CHAT):
        definition.setdefault("session_id", who.session_id)
    tenant, user = subject_of(who, tenant_id, user_id)
    view = run_command(services, CommandVerb.PROPOSE, who, tenant, user, definition=definition)
    watch = WatchView.model_validate(view)
    return JSONResponse(watch.model_dump(mode="json"), status_code=200 if watch.collapsed else 201)


@router.post(
    "/v1/watches",
    status_code=201,
    response_model=WatchView,
    responses=_ERRORS,
    summary="Create an active watcher directly (owners, managers, operators)",
)
def create(
    body: WatchBody,
    who: Caller,
    services: Services,
    tenant_id: TenantQ = None,
    user_id: UserQ = None,
) -> WatchView:
    tenant, user = subject_of(who, tenant_id, user_id)
    view = run_command(
        services, CommandVerb.CREATE, who, tenant, user, definition=body.definition()
    )
    return WatchView.model_validate(view)


@router.put(
    "/v1/watches/{watcher_id}",
    response_model=WatchView,
    responses=_ERRORS,
    summary="Replace a live watcher's definition (owners, managers, operators); If-Match",
)
def update(
    watcher_id: WatcherId,
    body: WatchUpdate,
    who: Caller,
    services: Services,
    response: Response,
    if_match: IfMatch = None,
    tenant_id: TenantQ = None,
    user_id: UserQ = None,
) -> WatchView:
    revision = _revision(if_match, body.expected_revision)
    definition = body.definition()
    if definition.setdefault("watcher_id", watcher_id) != watcher_id:
        raise ApiError(ApiCode.INVALID, "does not match the path", "watcher_id")
    tenant, user = subject_of(who, tenant_id, user_id)
    view = run_command(
        services,
        CommandVerb.UPDATE,
        who,
        tenant,
        user,
        watcher_id=watcher_id,
        definition=definition,
        expected_revision=revision,
    )
    return _tagged(view, response)


@router.get(
    "/v1/watches",
    response_model=WatchList,
    responses=_ERRORS,
    summary="List live watches (or those in one state); owners, managers",
)
def list_watches(
    who: Caller,
    services: Services,
    state: WatcherStatus | None = None,
    session_id: Annotated[str | None, Query(pattern=REF_PATTERN)] = None,
    tenant_id: TenantQ = None,
    user_id: UserQ = None,
) -> WatchList:
    if who.role in _SESSION_BOUND:  # DESIGN.md §9: owners and managers list watches
        raise ApiError(
            ApiCode.DENIED, f"role {who.role.value} may not list watches (schedules: /v1/schedules)"
        )
    tenant, user = subject_of(who, tenant_id, user_id)
    found = run_command(
        services, CommandVerb.LIST, who, tenant, user, state=state, session_id=session_id
    )
    return WatchList.model_validate(found)


@router.get(
    "/v1/watches/{watcher_id}",
    response_model=WatchView,
    responses=_ERRORS,
    summary="Inspect a watch; owners, managers",
)
def get_watch(
    watcher_id: WatcherId,
    who: Caller,
    services: Services,
    response: Response,
    tenant_id: TenantQ = None,
    user_id: UserQ = None,
) -> WatchView:
    tenant, user = subject_of(who, tenant_id, user_id)
    view = run_command(services, CommandVerb.SHOW, who, tenant, user, watcher_id=watcher_id)
    return _tagged(view, response)


def _lifecycle(verb: CommandVerb, summary: str) -> None:
    def move(
        watcher_id: WatcherId,
        who: Caller,
        services: Services,
        response: Response,
        expected_revision: RevisionQ = None,
        if_match: IfMatch = None,
        tenant_id: TenantQ = None,
        user_id: UserQ = None,
    ) -> WatchView:
        tenant, user = subject_of(who, tenant_id, user_id)
        view = run_command(
            services,
            verb,
            who,
            tenant,
            user,
            watcher_id=watcher_id,
            expected_revision=_revision(if_match, expected_revision),
        )
        return _tagged(view, response)

    router.post(
        f"/v1/watches/{{watcher_id}}:{verb.value}",
        response_model=WatchView,
        responses=_ERRORS,
        summary=summary,
        operation_id=f"{verb.value}_watch",
    )(move)


_lifecycle(CommandVerb.APPROVE, "Approve a proposal (cap and bounds checked); owners, managers")
_lifecycle(CommandVerb.PAUSE, "Pause a watch; owners, managers")
_lifecycle(CommandVerb.RESUME, "Resume a paused watch (cap checked); owners, managers")
_lifecycle(CommandVerb.CANCEL, "Cancel a watch (terminal); owners, managers")


@router.get(
    "/v1/watches/{watcher_id}/evaluations",
    response_model=EvaluationList,
    responses=_ERRORS,
    summary="The watch's receipts, newest first; owners, managers",
)
def evaluations(
    watcher_id: WatcherId,
    who: Caller,
    services: Services,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    tenant_id: TenantQ = None,
    user_id: UserQ = None,
) -> EvaluationList:
    tenant, user = subject_of(who, tenant_id, user_id)
    view = run_command(services, CommandVerb.SHOW, who, tenant, user, watcher_id=watcher_id)
    found, erased = guarded(
        lambda: services.ledger.evaluations(tenant, user, watcher_id, view["source_id"], limit)
    )
    return EvaluationList.model_validate({"evaluations": found, "erased": erased})


# --- schedules (the dispatch core) ------------------------------------------------------------


def schedule_verb(services: ApiServices, who: Principal, body: dict[str, Any]) -> dict[str, Any]:
    """One dispatch-core verb (``list``, ``cancel``) for ``who``; its refusal as an API error
    (the console's schedules page goes through here too)."""
    response = services.schedules(who).handle(body, who)
    if response.error is not None:
        code = _KIND_CODES.get(response.error.code, ApiCode.UNAVAILABLE)
        raise ApiError(code, response.error.message, response.error.field)
    return dict(response.result or {})


@router.get(
    "/v1/schedules",
    response_model=ScheduleList,
    responses=documented(403),
    summary="The caller's schedules in one chat",
)
def list_schedules(who: Caller, services: Services, chat: ChatQ = None) -> ScheduleList:
    return ScheduleList.model_validate(schedule_verb(services, who, {"verb": "list", "chat": chat}))


@router.post(
    "/v1/schedules/{name}:cancel",
    response_model=ScheduleCancelled,
    responses=documented(403, 404),
    summary="Cancel one of the caller's schedules",
)
def cancel_schedule(
    name: Annotated[str, Path(pattern=NAME_PATTERN)],
    who: Caller,
    services: Services,
    chat: ChatQ = None,
) -> ScheduleCancelled:
    result = schedule_verb(services, who, {"verb": "cancel", "name": name, "chat": chat})
    return ScheduleCancelled.model_validate(result)
