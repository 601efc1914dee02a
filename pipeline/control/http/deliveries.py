"""The delivery routes: list and inspect a subject's deliveries, redeliver one (DESIGN.md §9).

``GET /v1/deliveries`` (``state``, ``dead``, ``watcher_id``) and ``GET /v1/deliveries/{key}`` are
for owners, managers and operators whose grants the command processor confirms (:func:`granted`);
another subject's key is "not found". ``POST /v1/deliveries/{key}:redeliver`` is a ``redeliver``
command. Left out: the caller and round trip (``common``), reading (``backend``,
``pipeline.control.deliveries``), the app (``api``)."""

from typing import Annotated, Any, Final

from fastapi import APIRouter, Path, Query

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.common import (
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
    DeliveryList,
    DeliveryView,
    RedeliverView,
)
from pipeline.rules.authz import DenyReason, Principal, Role, Subject, Verb, may
from pipeline.rules.commands.model import CommandVerb

__all__ = ["DELIVERY_KEY_PATTERN", "granted", "may_read", "read_one", "router"]

router = APIRouter()

DELIVERY_KEY_PATTERN: Final = r"^[0-9a-f]{64}$"
_HIDDEN: Final = (DenyReason.TENANT_MISMATCH, DenyReason.USER_MISMATCH)
_STATES: Final = r"^(pending|dispatching|delivered|dead_letter|dead|suppressed|cancelled)$"

DeliveryKey = Annotated[
    str, Path(pattern=DELIVERY_KEY_PATTERN, description="The delivery key (64 hex).")
]


def may_read(who: Principal, tenant_id: str, user_id: str, key: str | None = None) -> None:
    """Owners, managers and operators read a subject's deliveries; another subject's key is
    "not found" (with ``key``), a list of another subject's is ``denied``."""
    decision = may(who, Verb.EVALUATIONS, Subject(tenant_id, user_id))
    if decision.allowed:
        return
    if key is not None and decision.reason in _HIDDEN:
        raise ApiError(ApiCode.NOT_FOUND, f"no delivery {key}", "delivery_key")
    raise ApiError(ApiCode.DENIED, decision.detail)


def granted(
    services: ApiServices, who: Principal, tenant: str, user: str, watcher_id: str | None = None
) -> None:
    """The subject's grants let it manage what it reads, as the command processor decides:
    ``show`` of ``watcher_id``'s watcher, or ``list`` (a grant to manage anything) without one;
    its refusal as the API error. Operators act for any subject by role alone."""
    if who.role is Role.OPERATOR:
        return
    if watcher_id is None:
        run_command(services, CommandVerb.LIST, who, tenant, user, offset=0, limit=0)
    else:
        run_command(services, CommandVerb.SHOW, who, tenant, user, watcher_id=watcher_id)


def read_one(services: ApiServices, who: Principal, tenant: str, user: str, key: str) -> Any:
    """One delivery the caller may read (role, then the grant of its watcher), or 404."""
    may_read(who, tenant, user, key)
    found = guarded(lambda: services.ledger.delivery(tenant, user, key))
    if found is None:
        raise ApiError(ApiCode.NOT_FOUND, f"no delivery {key}", "delivery_key")
    try:
        granted(services, who, tenant, user, found["watcher_id"])
    except ApiError as exc:
        if exc.code is ApiCode.NOT_FOUND:  # its watcher is gone from the registry
            raise ApiError(ApiCode.NOT_FOUND, f"no delivery {key}", "delivery_key") from None
        raise
    return found


@router.get(
    "/v1/deliveries",
    response_model=DeliveryList,
    responses=documented(403),
    summary="The subject's deliveries, newest first; state=dead for dead letters",
)
def deliveries(
    who: Caller,
    services: Services,
    state: Annotated[
        str | None, Query(pattern=_STATES, description="A delivery state, or dead.")
    ] = None,
    watcher_id: Annotated[str | None, Query(pattern=REF_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    tenant_id: TenantQ = None,
    user_id: UserQ = None,
) -> DeliveryList:
    tenant, user = subject_of(who, tenant_id, user_id)
    may_read(who, tenant, user)
    granted(services, who, tenant, user)
    found = guarded(lambda: services.ledger.deliveries(tenant, user, state, watcher_id))
    return DeliveryList.model_validate({"deliveries": found[:limit]})


@router.get(
    "/v1/deliveries/{delivery_key}",
    response_model=DeliveryView,
    responses=documented(403, 404),
    summary="One delivery: state, attempts, next attempt, last error",
)
def delivery(
    delivery_key: DeliveryKey,
    who: Caller,
    services: Services,
    tenant_id: TenantQ = None,
    user_id: UserQ = None,
) -> DeliveryView:
    tenant, user = subject_of(who, tenant_id, user_id)
    return DeliveryView.model_validate(read_one(services, who, tenant, user, delivery_key))


@router.post(
    "/v1/deliveries/{delivery_key}:redeliver",
    response_model=RedeliverView,
    status_code=202,
    responses=documented(403, 404, 409),
    summary="Redeliver a dead-lettered or suppressed delivery (same key, fresh attempts)",
)
def redeliver(
    delivery_key: DeliveryKey,
    who: Caller,
    services: Services,
    tenant_id: TenantQ = None,
    user_id: UserQ = None,
) -> RedeliverView:
    tenant, user = subject_of(who, tenant_id, user_id)
    found = read_one(services, who, tenant, user, delivery_key)
    if not found["redeliverable"]:
        raise ApiError(
            ApiCode.CONFLICT,
            f"delivery {delivery_key} is {found['state']}: only a dead-lettered or suppressed "
            "delivery is redelivered",
            "delivery_key",
        )
    result = run_command(
        services,
        CommandVerb.REDELIVER,
        who,
        tenant,
        user,
        delivery_key=delivery_key,
        watcher_id=found["watcher_id"],
    )
    return RedeliverView.model_validate(result)
