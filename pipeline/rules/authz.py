"""Authorization: grants matched fail-closed, and what each principal role may do.

Owns :class:`Grant`, the :class:`Principal` of a request, :func:`authorize` (grant matching for
an action, rechecked before every evaluation, delivery attempt and management command; no
wildcards: nothing is granted that a grant does not name) and :func:`may` (role rules, DESIGN.md
§3, §10). Authentication and where grants are stored are ``pipeline.control``'s and the command
processor's."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict, field_validator

from pipeline.rules.instants import utc

__all__ = [
    "Action",
    "AuthzDecision",
    "DenyReason",
    "Grant",
    "Principal",
    "Role",
    "Subject",
    "Verb",
    "authorize",
    "may",
]


class Action(StrEnum):
    """What a grant allows."""

    EVALUATE = "evaluate"
    DELIVER = "deliver"
    MANAGE = "manage"
    PROPOSE = "propose"
    APPROVE = "approve"


class DenyReason(StrEnum):
    """The first thing that was missing, in check order."""

    NO_GRANT = "no_grant"
    TENANT_MISMATCH = "tenant_mismatch"
    USER_MISMATCH = "user_mismatch"
    PURPOSE_MISMATCH = "purpose_mismatch"
    SOURCE_MISMATCH = "source_mismatch"
    TOOL_MISMATCH = "tool_mismatch"
    TARGET_MISMATCH = "target_mismatch"
    ACTION_MISMATCH = "action_mismatch"
    EXPIRED = "expired"
    ROLE = "role"
    SESSION_MISMATCH = "session_mismatch"


class Role(StrEnum):
    USER = "user"
    MANAGER = "manager"
    AGENT = "agent"
    SCOPED_CHAT = "scoped_chat"
    OPERATOR = "operator"
    PUBLISHER = "publisher"  # publishes events of its configured sources; nothing else
    SYSTEM = "system"


class Verb(StrEnum):
    """Control-plane verbs a principal may ask for (DESIGN.md §1, §9)."""

    PROPOSE = "propose"
    APPROVE = "approve"
    CREATE = "create"
    SHOW = "show"
    LIST = "list"
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    EVALUATIONS = "evaluations"
    ERASE = "erase"
    CLOSE = "close"
    SCHEDULE = "schedule"
    SEND = "send"
    PROMPT = "prompt"
    QUERY = "query"
    RUN = "run"
    GRANT = "grant"
    REDELIVER = "redeliver"  # a dead-lettered or suppressed delivery sent again
    REPLAY = "replay"  # write what an authorization failure skipped (operators only)
    TRANSFER = "transfer"  # export and import a subject's watchers (operators only)


class Grant(BaseModel):
    """One subject's permission for one purpose over named sources, tools and targets."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    grant_id: str
    tenant_id: str
    user_id: str
    purpose: str
    sources: frozenset[str]
    tools: frozenset[str] = frozenset()
    targets: frozenset[str] = frozenset()
    actions: frozenset[Action]
    until: datetime

    @field_validator("until")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return utc(value)


class Principal(BaseModel):
    """Who is asking: authenticated at the edge, asserted on every command."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    role: Role
    tenant_id: str
    user_id: str
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class Subject:
    """The owner of a watcher: every read, list, cancel and erasure names exactly one."""

    tenant_id: str
    user_id: str


@dataclass(frozen=True, slots=True)
class AuthzDecision:
    allowed: bool
    reason: DenyReason | None = None
    detail: str = ""
    grant_id: str | None = None

    def __str__(self) -> str:
        if self.allowed:
            return f"allowed by grant {self.grant_id}" if self.grant_id else "allowed"
        return f"denied: {self.detail}"


_RANK: Final = {reason: rank for rank, reason in enumerate(DenyReason)}
"""A deny reason's place in declaration order: the later, the more fields the grant matched."""


def _first_miss(
    grant: Grant,
    *,
    tenant_id: str,
    user_id: str,
    purpose: str,
    action: Action,
    source_id: str,
    tool: str | None,
    target: str | None,
    now: datetime,
) -> tuple[DenyReason, str] | None:
    """The first field ``grant`` does not cover, or ``None`` when it covers the request.

    Checked one by one in this order, each message written only for the miss (the evaluator
    decides this for every watcher it first meets)."""
    if grant.tenant_id != tenant_id:
        return DenyReason.TENANT_MISMATCH, f"tenant {tenant_id!r}"
    if grant.user_id != user_id:
        return DenyReason.USER_MISMATCH, f"user {user_id!r}"
    if grant.purpose != purpose:
        return DenyReason.PURPOSE_MISMATCH, f"purpose {purpose!r}"
    if source_id not in grant.sources:
        return DenyReason.SOURCE_MISMATCH, f"source {source_id!r}"
    if tool is not None and tool not in grant.tools:
        return DenyReason.TOOL_MISMATCH, f"tool {tool!r}"
    if target is not None and target not in grant.targets:
        return DenyReason.TARGET_MISMATCH, f"target {target!r}"
    if action not in grant.actions:
        return DenyReason.ACTION_MISMATCH, f"action {action.value!r}"
    if not utc(now) < grant.until:
        return DenyReason.EXPIRED, f"grant expired at {grant.until}"
    return None


def authorize(
    grants: Iterable[Grant],
    *,
    tenant_id: str,
    user_id: str,
    purpose: str,
    action: Action,
    source_id: str,
    tool: str | None = None,
    target: str | None = None,
    now: datetime,
) -> AuthzDecision:
    """Allowed iff one grant covers every named field at ``now``; otherwise the nearest miss.

    ``tool`` and ``target`` are checked when given (polling evaluations, deliveries). The deny
    reason comes from the grant that matched the most fields, so the operator sees what is
    missing; grants of other tenants never decide the message beyond ``no_grant``.
    """
    best: tuple[int, DenyReason, str] | None = None
    for grant in grants:
        if grant.tenant_id != tenant_id:
            continue
        miss = _first_miss(
            grant,
            tenant_id=tenant_id,
            user_id=user_id,
            purpose=purpose,
            action=action,
            source_id=source_id,
            tool=tool,
            target=target,
            now=now,
        )
        if miss is None:
            return AuthzDecision(True, grant_id=grant.grant_id)
        rank = _RANK[miss[0]]
        if best is None or rank > best[0]:
            best = (rank, miss[0], f"grant {grant.grant_id} does not cover {miss[1]}")
    if best is None:
        return AuthzDecision(
            False, DenyReason.NO_GRANT, f"no grant for tenant {tenant_id!r} user {user_id!r}"
        )
    return AuthzDecision(False, best[1], best[2])


_OWNER_VERBS = frozenset(
    {
        Verb.PROPOSE,
        Verb.APPROVE,
        Verb.CREATE,
        Verb.SHOW,
        Verb.LIST,
        Verb.PAUSE,
        Verb.RESUME,
        Verb.CANCEL,
        Verb.EVALUATIONS,
        Verb.ERASE,
        Verb.SCHEDULE,
        Verb.SEND,
        Verb.PROMPT,
        Verb.QUERY,
        Verb.RUN,
        Verb.REDELIVER,
    }
)
_ROLE_VERBS: dict[Role, frozenset[Verb]] = {
    Role.USER: _OWNER_VERBS,
    Role.MANAGER: _OWNER_VERBS,
    # Agents (DESIGN.md §10): send, schedule send or prompt, list and cancel the schedules their
    # session created (the command processor holds them to those), propose. Never run, query,
    # create, update, pause, approve or grant.
    Role.AGENT: frozenset({Verb.PROPOSE, Verb.SCHEDULE, Verb.SEND, Verb.LIST, Verb.CANCEL}),
    Role.SCOPED_CHAT: frozenset({Verb.SEND, Verb.PROMPT, Verb.QUERY}),
    Role.OPERATOR: frozenset(Verb),
    Role.SYSTEM: frozenset({Verb.CLOSE}),
    Role.PUBLISHER: frozenset(),  # events only (POST /v1/events): no control-plane verb
}


def may(
    principal: Principal, verb: Verb, subject: Subject, *, session_id: str | None = None
) -> AuthzDecision:
    """Whether ``principal``'s role allows ``verb`` on ``subject``'s objects.

    Operators and the system act for any subject; managers for any user of their tenant;
    everyone else only for themselves. A session-bound principal (agent, scoped chat) only
    reaches objects of its own session when ``session_id`` names one. Grants are checked
    separately, with :func:`authorize`.
    """
    role = principal.role
    if verb not in _ROLE_VERBS[role]:
        return AuthzDecision(False, DenyReason.ROLE, f"role {role.value} may not {verb.value}")
    if role in (Role.OPERATOR, Role.SYSTEM):
        return AuthzDecision(True)
    if principal.tenant_id != subject.tenant_id:
        return AuthzDecision(False, DenyReason.TENANT_MISMATCH, "another tenant's object")
    if role is not Role.MANAGER and principal.user_id != subject.user_id:
        return AuthzDecision(False, DenyReason.USER_MISMATCH, "another user's object")
    bound = role in (Role.AGENT, Role.SCOPED_CHAT)
    if bound and session_id is not None and principal.session_id != session_id:
        return AuthzDecision(False, DenyReason.SESSION_MISMATCH, "another session's object")
    return AuthzDecision(True)
