"""The in-app ledger routes: a user's notifications, and acknowledging one (DESIGN.md §9).

The ledger is the caller's own subject's, read by users, managers and operators (never agents or
scoped chats) while a grant lets the subject manage watchers (``deliveries.granted``). Acknowledging
is idempotent; one of a notification the caller lacks is 404. Left out: the caller (``common``) and
the records (``backend``)."""

from typing import Annotated, Final

from fastapi import APIRouter, Path, Query

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.common import ApiServices, Caller, Services, documented, guarded
from pipeline.control.http.deliveries import granted
from pipeline.control.http.models import AckView, NotificationList
from pipeline.rules.authz import Principal, Subject, Verb, may

__all__ = ["own_ledger", "router"]

router = APIRouter()

_DELIVERY_KEY: Final = r"^[0-9a-f]{64}$"


def own_ledger(services: ApiServices, who: Principal) -> tuple[str, str]:
    """The caller's own subject, when its role may read a ledger and a grant lets it manage
    watchers (a revoked grant reads nothing); otherwise the API's refusal. Blocking."""
    decision = may(who, Verb.SHOW, Subject(who.tenant_id, who.user_id))
    if not decision.allowed:
        raise ApiError(ApiCode.DENIED, decision.detail)
    granted(services, who, who.tenant_id, who.user_id)
    return who.tenant_id, who.user_id


@router.get(
    "/v1/notifications",
    response_model=NotificationList,
    responses=documented(403),
    summary="The caller's in-app ledger, newest first",
)
def notifications(
    who: Caller,
    services: Services,
    unacked: bool = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> NotificationList:
    tenant, user = own_ledger(services, who)
    found, erased = guarded(lambda: services.ledger.notifications(tenant, user))
    if unacked:
        found = [n for n in found if n["acked_at"] is None]
    return NotificationList.model_validate({"notifications": found[:limit], "erased": erased})


@router.post(
    "/v1/notifications/{delivery_key}:ack",
    response_model=AckView,
    responses=documented(403, 404),
    summary="Acknowledge one of the caller's notifications (idempotent)",
)
def ack(
    delivery_key: Annotated[str, Path(pattern=_DELIVERY_KEY)], who: Caller, services: Services
) -> AckView:
    tenant, user = own_ledger(services, who)
    done = guarded(lambda: services.ledger.ack(tenant, user, delivery_key))
    if done is None:
        raise ApiError(ApiCode.NOT_FOUND, f"no notification {delivery_key}", "delivery_key")
    return AckView.model_validate(done)
