"""One script call for a batch of charges counts exactly as one script call per charge does."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis

from consumers.evaluator.budgets import Charge, EvaluationBudgets
from pipeline.rules.budgets import BudgetCaps, BudgetScope, BudgetVerdict, Dimension
from pipeline.rules.errors import BudgetStoreError

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC)


def charges(caps: BudgetCaps, tokens: list[str], watcher: str = "w") -> list[Charge]:
    scope = BudgetScope("acme", "ann", watcher)
    return [
        Charge(scope, caps, {Dimension.EVALUATIONS: 1, Dimension.TOKENS: 7}, token)
        for token in tokens
    ]


@pytest.fixture
def budgets(redis_url: str) -> EvaluationBudgets:
    return EvaluationBudgets(redis.Redis.from_url(redis_url), key_prefix=f"t:{uuid.uuid4().hex}:")


def test_batch_charges_in_order_until_the_cap_then_refuses(budgets: EvaluationBudgets) -> None:
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=3)
    verdicts = budgets.charge_many(charges(caps, [f"t{i}" for i in range(5)]), NOW)
    assert verdicts == [BudgetVerdict.OK] * 3 + [BudgetVerdict.EXHAUSTED] * 2
    usage = budgets.store.usage(BudgetScope("acme", "ann", "w"), caps, NOW)
    assert usage[Dimension.EVALUATIONS] == 3 and usage[Dimension.TOKENS] == 21


def test_a_token_charged_by_the_batch_answers_the_same_on_the_single_path(
    budgets: EvaluationBudgets,
) -> None:
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=1)
    first, second = charges(caps, ["a", "b"])
    assert budgets.charge_many([first, second], NOW) == [BudgetVerdict.OK, BudgetVerdict.EXHAUSTED]
    assert budgets.charge(first, NOW) is BudgetVerdict.OK  # replayed: no second increment
    assert budgets.charge(second, NOW) is BudgetVerdict.EXHAUSTED
    assert budgets.charge_many([first, second], NOW) == [BudgetVerdict.OK, BudgetVerdict.EXHAUSTED]
    usage = budgets.store.usage(BudgetScope("acme", "ann", "w"), caps, NOW)
    assert usage[Dimension.EVALUATIONS] == 1


def test_batch_keeps_each_watchers_window_apart_and_handles_odd_tokens(
    budgets: EvaluationBudgets,
) -> None:
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=1)
    odd = 'offset:vigil.events:0:1:["acmé","a\\"n","w,🙂"]'
    batch = charges(caps, [odd], "w1") + charges(caps, [odd], "w2") + charges(caps, ["x"], "w1")
    verdicts = budgets.charge_many(batch, NOW)
    assert verdicts == [BudgetVerdict.OK, BudgetVerdict.OK, BudgetVerdict.EXHAUSTED]
    assert budgets.charge(batch[0], NOW) is BudgetVerdict.OK  # the same token, found again


def test_a_negative_amount_is_refused_before_anything_reaches_redis(
    budgets: EvaluationBudgets,
) -> None:
    caps = BudgetCaps(window=timedelta(hours=1))
    bad = Charge(BudgetScope("acme", "ann", "w"), caps, {Dimension.TOKENS: -1}, "neg")
    with pytest.raises(BudgetStoreError, match="negative"):
        budgets.charge_many([bad], NOW)
