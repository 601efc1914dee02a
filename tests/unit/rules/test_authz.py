"""Grant matching (fail-closed, no wildcards, with the reason) and principal role rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rules.authz import (
    Action,
    AuthzDecision,
    DenyReason,
    Grant,
    Principal,
    Role,
    Subject,
    Verb,
    authorize,
    may,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def make_grant(**overrides: Any) -> Grant:
    fields: dict[str, Any] = {
        "grant_id": "g-1",
        "tenant_id": "acme",
        "user_id": "u-42",
        "purpose": "ops.alert",
        "sources": frozenset({"status.page"}),
        "tools": frozenset({"status-page"}),
        "targets": frozenset({"ops-hook"}),
        "actions": frozenset({Action.EVALUATE, Action.DELIVER}),
        "until": NOW + timedelta(hours=1),
    }
    fields.update(overrides)
    return Grant(**fields)


def ask(grants: list[Grant], **overrides: Any) -> Any:
    request: dict[str, Any] = {
        "tenant_id": "acme",
        "user_id": "u-42",
        "purpose": "ops.alert",
        "action": Action.EVALUATE,
        "source_id": "status.page",
        "tool": "status-page",
        "target": None,
        "now": NOW,
    }
    request.update(overrides)
    return authorize(grants, **request)


def test_exact_grant_allows_and_names_itself() -> None:
    decision = ask([make_grant()])
    assert decision.allowed and decision.grant_id == "g-1"


def test_no_grants_denies_with_no_grant() -> None:
    decision = ask([])
    assert not decision.allowed and decision.reason is DenyReason.NO_GRANT


@pytest.mark.parametrize(
    ("request_change", "reason"),
    [
        ({"user_id": "u-43"}, DenyReason.USER_MISMATCH),
        ({"purpose": "ops.other"}, DenyReason.PURPOSE_MISMATCH),
        ({"source_id": "other.source"}, DenyReason.SOURCE_MISMATCH),
        ({"tool": "other-tool"}, DenyReason.TOOL_MISMATCH),
        ({"action": Action.DELIVER, "target": "other-hook"}, DenyReason.TARGET_MISMATCH),
        ({"action": Action.MANAGE}, DenyReason.ACTION_MISMATCH),
        ({"now": NOW + timedelta(hours=1)}, DenyReason.EXPIRED),
    ],
)
def test_any_field_mismatch_denies_with_its_reason(
    request_change: dict[str, Any], reason: DenyReason
) -> None:
    decision = ask([make_grant()], **request_change)
    assert not decision.allowed
    assert decision.reason is reason
    assert decision.detail


def test_other_tenants_grant_never_allows_or_leaks() -> None:
    decision = ask([make_grant(tenant_id="other")])
    assert decision.reason is DenyReason.NO_GRANT


def test_grant_is_valid_until_strictly_before_until() -> None:
    assert ask([make_grant()], now=NOW + timedelta(minutes=59, seconds=59)).allowed
    assert not ask([make_grant()], now=NOW + timedelta(hours=1)).allowed


def test_deny_reason_comes_from_the_nearest_grant() -> None:
    far = make_grant(grant_id="g-far", purpose="ops.other")
    near = make_grant(grant_id="g-near", actions=frozenset({Action.DELIVER}))
    decision = ask([far, near])
    assert decision.reason is DenyReason.ACTION_MISMATCH
    assert "g-near" in decision.detail


def test_one_matching_grant_among_many_allows() -> None:
    grants = [make_grant(grant_id="a", purpose="x.y"), make_grant(grant_id="b")]
    assert ask(grants).grant_id == "b"


def test_empty_tools_never_allow_a_tool() -> None:
    assert not ask([make_grant(tools=frozenset())]).allowed


def test_without_tool_or_target_only_the_named_fields_are_checked() -> None:
    assert ask([make_grant(tools=frozenset())], tool=None).allowed


def test_grant_with_naive_until_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        make_grant(until=datetime(2027, 1, 1))


# --- roles ---------------------------------------------------------------------------------

OWNER = Subject("acme", "u-42")


def principal(role: Role, **overrides: Any) -> Principal:
    fields: dict[str, Any] = {
        "name": role.value,
        "role": role,
        "tenant_id": "acme",
        "user_id": "u-42",
    }
    fields.update(overrides)
    return Principal(**fields)


@pytest.mark.parametrize("verb", [Verb.PROPOSE, Verb.SCHEDULE, Verb.SEND, Verb.LIST, Verb.CANCEL])
def test_agent_may_propose_send_schedule_and_list_and_cancel_its_schedules(verb: Verb) -> None:
    # list and cancel reach only the schedules its session created: the processor's rule.
    assert may(principal(Role.AGENT, session_id="s-1"), verb, OWNER).allowed


@pytest.mark.parametrize(
    "verb",
    [
        Verb.APPROVE,
        Verb.SHOW,
        Verb.GRANT,
        Verb.CREATE,
        Verb.PAUSE,
        Verb.RESUME,
        Verb.RUN,
        Verb.QUERY,
        Verb.PROMPT,
        Verb.ERASE,
    ],
)
def test_agent_may_not_approve_inspect_manage_or_run(verb: Verb) -> None:
    decision = may(principal(Role.AGENT, session_id="s-1"), verb, OWNER)
    assert not decision.allowed and decision.reason is DenyReason.ROLE


@pytest.mark.parametrize("verb", [Verb.APPROVE, Verb.LIST, Verb.SHOW, Verb.CANCEL, Verb.PAUSE])
@pytest.mark.parametrize("role", [Role.USER, Role.MANAGER])
def test_owner_and_manager_may_approve_inspect_list_cancel(role: Role, verb: Verb) -> None:
    assert may(principal(role), verb, OWNER).allowed


@pytest.mark.parametrize("verb", [Verb.PROPOSE, Verb.APPROVE, Verb.CANCEL, Verb.LIST])
def test_scoped_chat_cannot_manage_watches(verb: Verb) -> None:
    assert not may(principal(Role.SCOPED_CHAT, session_id="s-1"), verb, OWNER).allowed


def test_manager_acts_for_another_user_of_the_same_tenant_only() -> None:
    manager = principal(Role.MANAGER, user_id="boss")
    assert may(manager, Verb.APPROVE, OWNER).allowed
    other_tenant = may(manager, Verb.APPROVE, Subject("globex", "u-42"))
    assert other_tenant.reason is DenyReason.TENANT_MISMATCH


def test_user_cannot_reach_another_users_watch() -> None:
    decision = may(principal(Role.USER), Verb.SHOW, Subject("acme", "u-43"))
    assert decision.reason is DenyReason.USER_MISMATCH


def test_tenants_never_see_each_other() -> None:
    decision = may(principal(Role.USER), Verb.LIST, Subject("globex", "u-42"))
    assert decision.reason is DenyReason.TENANT_MISMATCH


def test_operator_acts_for_any_subject_including_grants() -> None:
    operator = principal(Role.OPERATOR, tenant_id="ops", user_id="root")
    assert may(operator, Verb.CANCEL, Subject("globex", "u-1")).allowed
    assert may(operator, Verb.GRANT, Subject("globex", "u-1")).allowed


def test_only_operator_manages_grants() -> None:
    for role in (Role.USER, Role.MANAGER, Role.AGENT, Role.SCOPED_CHAT, Role.SYSTEM):
        assert not may(principal(role), Verb.GRANT, OWNER).allowed


def test_system_principal_only_closes() -> None:
    system = principal(Role.SYSTEM, tenant_id="vigil", user_id="evaluator")
    assert may(system, Verb.CLOSE, OWNER).allowed
    assert not may(system, Verb.CREATE, OWNER).allowed


def test_agent_bound_to_a_session_cannot_reach_another_session() -> None:
    agent = principal(Role.AGENT, session_id="s-1")
    assert may(agent, Verb.PROPOSE, OWNER, session_id="s-1").allowed
    decision = may(agent, Verb.PROPOSE, OWNER, session_id="s-2")
    assert decision.reason is DenyReason.SESSION_MISMATCH


def _old_authorize(grants: list[Grant], **asked: Any) -> AuthzDecision:
    """``authorize`` as it was before issue 19 (every check and message built per grant, the
    rank from ``list(DenyReason)``): the oracle the one-by-one checks must match."""
    tenant_id, user_id, now = asked["tenant_id"], asked["user_id"], asked["now"]
    best: tuple[int, DenyReason, str] | None = None
    order = list(DenyReason)
    for grant in grants:
        if grant.tenant_id != tenant_id:
            continue
        checks = [
            (grant.tenant_id == tenant_id, DenyReason.TENANT_MISMATCH, f"tenant {tenant_id!r}"),
            (grant.user_id == user_id, DenyReason.USER_MISMATCH, f"user {user_id!r}"),
            (
                grant.purpose == asked["purpose"],
                DenyReason.PURPOSE_MISMATCH,
                f"purpose {asked['purpose']!r}",
            ),
            (
                asked["source_id"] in grant.sources,
                DenyReason.SOURCE_MISMATCH,
                f"source {asked['source_id']!r}",
            ),
            (
                asked["tool"] is None or asked["tool"] in grant.tools,
                DenyReason.TOOL_MISMATCH,
                f"tool {asked['tool']!r}",
            ),
            (
                asked["target"] is None or asked["target"] in grant.targets,
                DenyReason.TARGET_MISMATCH,
                f"target {asked['target']!r}",
            ),
            (
                asked["action"] in grant.actions,
                DenyReason.ACTION_MISMATCH,
                f"action {asked['action'].value!r}",
            ),
            (now < grant.until, DenyReason.EXPIRED, f"grant expired at {grant.until}"),
        ]
        miss = next(((reason, what) for ok, reason, what in checks if not ok), None)
        if miss is None:
            return AuthzDecision(True, grant_id=grant.grant_id)
        rank = order.index(miss[0])
        if best is None or rank > best[0]:
            best = (rank, miss[0], f"grant {grant.grant_id} does not cover {miss[1]}")
    if best is None:
        return AuthzDecision(
            False, DenyReason.NO_GRANT, f"no grant for tenant {tenant_id!r} user {user_id!r}"
        )
    return AuthzDecision(False, best[1], best[2])


_few = st.sampled_from(["a", "b"])
_grants = st.builds(
    Grant,
    grant_id=st.sampled_from(["g-1", "g-2", "g-3"]),
    tenant_id=_few,
    user_id=_few,
    purpose=_few,
    sources=st.frozensets(_few),
    tools=st.frozensets(_few),
    targets=st.frozensets(_few),
    actions=st.frozensets(st.sampled_from(list(Action))),
    until=st.sampled_from([NOW - timedelta(seconds=1), NOW, NOW + timedelta(seconds=1)]),
)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(
    grants=st.lists(_grants, max_size=4),
    tenant_id=_few,
    user_id=_few,
    purpose=_few,
    source_id=_few,
    tool=st.none() | _few,
    target=st.none() | _few,
    action=st.sampled_from(list(Action)),
)
def test_authorize_decides_and_words_exactly_as_before(grants: list[Grant], **asked: Any) -> None:
    asked["now"] = NOW
    assert authorize(grants, **asked) == _old_authorize(grants, **asked)
