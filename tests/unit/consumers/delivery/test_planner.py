"""Delivery's authorization recheck against a view that may be older than the entry: the
evaluator decided the entry under a grant this process has not read yet, so a denial is
checked once more after reading the grants to their end (``Planner.stale``), and then stands."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from consumers.delivery.planner import Decision, Pending, Planner
from pipeline.records.delivery_state import first_record
from pipeline.records.grant import encode_grant
from pipeline.rules.authz import Action, Grant
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.commands import GrantRecord
from pipeline.rules.dispatch import DispatchAction
from pipeline.rules.outbox import build_entry
from pipeline.runtime.tables import Table, TableKind, TableSpec
from pipeline.runtime.views import GrantIndex, LifecycleIndex
from tests.unit.consumers.evaluator.test_fast_paths import CODEC, NOW, definition, event

pytestmark = pytest.mark.unit

_DELIVER = Grant(
    grant_id="g-new",
    tenant_id="acme",
    user_id="ann",
    purpose="ops.alert",
    sources=frozenset({"ci"}),
    targets=frozenset({"ops-hook"}),
    actions=frozenset({Action.EVALUATE, Action.DELIVER}),
    until=NOW + timedelta(days=1),
)


def _planner(grants: Table, catch_up: Any) -> Planner:
    lifecycle = Table(TableSpec("lifecycle", "lifecycle", TableKind.GLOBAL), -1)
    return Planner(
        grants=GrantIndex(grants, CODEC),
        lifecycle=LifecycleIndex(lifecycle, CODEC),
        budgets=None,  # type: ignore[arg-type]  # prepare charges nothing
        budget_defaults=BudgetCaps(window=timedelta(hours=1)),
        catch_up=catch_up,
    )


def _prepared(planner: Planner) -> Decision | Pending:
    d = definition().with_version(1)
    entry = build_entry(d, event(), "k" * 64, NOW)
    return planner.prepare(first_record(entry, 0, NOW), entry, NOW)


def test_a_grant_the_view_has_not_read_yet_is_read_before_a_denial() -> None:
    grants = Table(TableSpec("grants", "grants", TableKind.GLOBAL), -1)
    caught_up: list[int] = []

    def catch_up() -> None:  # the grant reached the broker before the entry did
        caught_up.append(1)
        grants.apply(_DELIVER.grant_id, encode_grant(CODEC, GrantRecord(_DELIVER, NOW, "op")))

    planner = _planner(grants, catch_up)
    assert isinstance(_prepared(planner), Pending)  # allowed: on to its budget charge
    assert caught_up == [1] and not planner.stale


def test_a_denial_stands_after_one_read_to_the_end() -> None:
    grants = Table(TableSpec("grants", "grants", TableKind.GLOBAL), -1)
    caught_up: list[int] = []
    planner = _planner(grants, lambda: caught_up.append(1))
    first = _prepared(planner)
    assert isinstance(first, Decision) and first.plan.action is DispatchAction.SUPPRESS
    assert _prepared(planner) == first  # the view is fresh for this firing: no second read
    assert caught_up == [1]
    planner.stale = True  # the next firing's dues may be newer than the view again
    assert _prepared(planner) == first and caught_up == [1, 1]
