"""One script call for a batch of charges counts exactly as one charge at a time does."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis

from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import (
    BudgetCaps,
    BudgetCheck,
    BudgetScope,
    BudgetVerdict,
    Charge,
    Dimension,
)
from pipeline.rules.errors import DefinitionError

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC)


def charges(caps: BudgetCaps, tokens: list[str], watcher: str = "w") -> list[Charge]:
    scope = BudgetScope("acme", "ann", watcher)
    return [
        Charge(scope, caps, {Dimension.EVALUATIONS: 1, Dimension.TOKENS: 7}, token)
        for token in tokens
    ]


def verdicts_of(checks: list[BudgetCheck]) -> list[BudgetVerdict]:
    return [check.verdict for check in checks]


def one(budgets: RedisBudgets, charge: Charge) -> BudgetVerdict:
    """The charge alone, on the single-charge path."""
    check = budgets.charge(charge.scope, charge.caps, charge.increment, charge.token, NOW)
    return check.verdict


@pytest.fixture
def budgets(redis_url: str) -> RedisBudgets:
    return RedisBudgets(redis.Redis.from_url(redis_url), key_prefix=f"t:{uuid.uuid4().hex}:")


def test_batch_charges_in_order_until_the_cap_then_refuses(budgets: RedisBudgets) -> None:
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=3)
    verdicts = verdicts_of(budgets.charge_many(charges(caps, [f"t{i}" for i in range(5)]), NOW))
    assert verdicts == [BudgetVerdict.OK] * 3 + [BudgetVerdict.EXHAUSTED] * 2
    usage = budgets.usage(BudgetScope("acme", "ann", "w"), caps, NOW)
    assert usage[Dimension.EVALUATIONS] == 3 and usage[Dimension.TOKENS] == 21


def test_a_token_charged_by_the_batch_answers_the_same_on_the_single_path(
    budgets: RedisBudgets,
) -> None:
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=1)
    first, second = charges(caps, ["a", "b"])
    both = [BudgetVerdict.OK, BudgetVerdict.EXHAUSTED]
    assert verdicts_of(budgets.charge_many([first, second], NOW)) == both
    assert one(budgets, first) is BudgetVerdict.OK  # replayed: no second increment
    assert one(budgets, second) is BudgetVerdict.EXHAUSTED
    assert verdicts_of(budgets.charge_many([first, second], NOW)) == both
    usage = budgets.usage(BudgetScope("acme", "ann", "w"), caps, NOW)
    assert usage[Dimension.EVALUATIONS] == 1


def test_batch_keeps_each_watchers_window_apart_and_handles_odd_tokens(
    budgets: RedisBudgets,
) -> None:
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=1)
    odd = 'offset:vigil.events:0:1:["acmé","a\\"n","w,🙂"]'
    batch = charges(caps, [odd], "w1") + charges(caps, [odd], "w2") + charges(caps, ["x"], "w1")
    verdicts = verdicts_of(budgets.charge_many(batch, NOW))
    assert verdicts == [BudgetVerdict.OK, BudgetVerdict.OK, BudgetVerdict.EXHAUSTED]
    assert one(budgets, batch[0]) is BudgetVerdict.OK  # the same token, found again


def test_a_negative_amount_is_refused_before_anything_reaches_redis(
    budgets: RedisBudgets,
) -> None:
    caps = BudgetCaps(window=timedelta(hours=1))
    bad = Charge(BudgetScope("acme", "ann", "w"), caps, {Dimension.TOKENS: -1}, "neg")
    with pytest.raises(DefinitionError, match=r"0\.\.") as caught:
        budgets.charge_many([bad], NOW)
    assert caught.value.field == "tokens"


def test_verdicts_alone_are_the_batchs_verdicts(budgets: RedisBudgets) -> None:
    caps = BudgetCaps(window=timedelta(hours=1), evaluations=2)
    batch = charges(caps, ["a", "b", "c"])
    expected = [BudgetVerdict.OK, BudgetVerdict.OK, BudgetVerdict.EXHAUSTED]
    assert budgets.verdicts_many(batch, NOW) == expected
    assert verdicts_of(budgets.charge_many(batch, NOW)) == expected  # the same tokens again
    assert budgets.verdicts_many(charges(caps, ["d"]), NOW) == [BudgetVerdict.EXHAUSTED]
    assert budgets.verdicts_many([], NOW) == []
