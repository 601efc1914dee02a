"""The grant routes (operators): add, list, revoke (DESIGN.md §9).

Grants are records written by the command processor, which refuses every role but operator;
a grant's subject is the command's subject. The body is validated as a
:class:`~pipeline.rules.commands.model.GrantSpec` here (references, an aware ``until``), so a bad
one is 422 before it travels.

Left out: the shared caller (``common``) and the rules (``pipeline.rules.commands.apply``).
"""

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import ValidationError

from pipeline.control.http.auth import ApiCode, ApiError
from pipeline.control.http.common import (
    Caller,
    Services,
    TenantQ,
    UserQ,
    documented,
    invalid,
    run_command,
)
from pipeline.control.http.models import REF_PATTERN, GrantBody, GrantList, GrantView, RevokeView
from pipeline.rules.commands.model import CommandVerb, GrantSpec
from pipeline.rules.errors import DefinitionError

__all__ = ["router"]

router = APIRouter()


@router.post(
    "/v1/grants",
    status_code=201,
    response_model=GrantView,
    responses=documented(403),
    summary="Add a grant (operators)",
)
def add_grant(body: GrantBody, who: Caller, services: Services) -> GrantView:
    try:
        spec = GrantSpec.model_validate(body.model_dump())
    except DefinitionError as exc:
        raise ApiError(ApiCode.INVALID, exc.message, exc.field) from None
    except ValidationError as exc:
        raise invalid(exc) from None
    view = run_command(
        services, CommandVerb.GRANT_ADD, who, spec.tenant_id, spec.user_id, grant=spec
    )
    return GrantView.model_validate(view)


@router.get(
    "/v1/grants",
    response_model=GrantList,
    responses=documented(403),
    summary="List grants (operators)",
)
def list_grants(
    who: Caller, services: Services, tenant_id: TenantQ = None, user_id: UserQ = None
) -> GrantList:
    found = run_command(services, CommandVerb.GRANT_LIST, who, who.tenant_id, who.user_id)
    wanted = [
        g
        for g in found["grants"]
        if tenant_id in (None, g["tenant_id"]) and user_id in (None, g["user_id"])
    ]
    return GrantList.model_validate({"grants": wanted})


@router.delete(
    "/v1/grants/{grant_id}",
    response_model=RevokeView,
    responses=documented(403, 404),
    summary="Revoke a grant (operators)",
)
def revoke_grant(
    grant_id: Annotated[str, Path(pattern=REF_PATTERN)], who: Caller, services: Services
) -> RevokeView:
    view = run_command(
        services, CommandVerb.GRANT_REVOKE, who, who.tenant_id, who.user_id, grant_id=grant_id
    )
    return RevokeView.model_validate(view)
