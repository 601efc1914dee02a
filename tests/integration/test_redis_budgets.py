"""Budget counters against the real Redis — one server, and a 3-master Redis Cluster started by
``redis.sh cluster-start`` — atomic all-or-nothing charges, idempotent tokens, window rollover,
exact subject erasure, a batch over many subjects split by hash slot, and Redis down →
BudgetStoreError."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.retry import Retry

from pipeline.redis.budgets import EXPIRY_GRACE, RedisBudgets
from pipeline.redis.connect import connect
from pipeline.rules.budgets import BudgetCaps, BudgetScope, BudgetVerdict, Charge, Dimension
from pipeline.rules.errors import BudgetStoreError
from tests.chaos.servers import OwnRedisCluster, ServerError, worker_ports

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 8, 12, 0, 5, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
MS = timedelta(milliseconds=1)
D, A = Dimension.DELIVERIES, Dimension.ATTEMPTS


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnRedisCluster]:
    """A 3-master Redis Cluster of this test module's own, on this xdist worker's ports."""
    base = worker_ports(slot=2)[0]
    nodes = OwnRedisCluster((base, base + 1, base + 2), tmp_path_factory.mktemp("cluster"), 3)
    try:
        nodes.start()
        yield nodes
    finally:
        with contextlib.suppress(ServerError):
            nodes.stop()


@pytest.fixture(params=["single", "cluster"])
def client(request: pytest.FixtureRequest, redis_url: str) -> Iterator[redis.Redis]:
    """The shared Redis, then a Redis Cluster: every budget test runs against both."""
    url = redis_url if request.param == "single" else request.getfixturevalue("cluster").url
    connection = connect(url)
    yield connection
    connection.close()


@pytest.fixture
def budgets(client: redis.Redis, unique_name: Callable[[str], str]) -> Iterator[RedisBudgets]:
    """Budgets under a key prefix private to this test, deleted afterwards."""
    prefix = f"vigil-test:{unique_name('budget')}:"
    yield RedisBudgets(client, key_prefix=prefix)
    for key in client.scan_iter(match=f"{prefix}*"):
        client.delete(key)


@pytest.fixture
def scope(unique_name: Callable[[str], str]) -> BudgetScope:
    return BudgetScope("acme", unique_name("user"), "watch-1")


def test_charge_within_caps_increments_every_dimension(
    budgets: RedisBudgets, scope: BudgetScope
) -> None:
    caps = BudgetCaps(window=MINUTE, deliveries=2, attempts=5)
    result = budgets.charge(scope, caps, {D: 1, A: 1}, "t1", T0)
    assert result.verdict is BudgetVerdict.OK
    assert result.remaining[D] == 1 and result.remaining[A] == 4
    assert budgets.usage(scope, caps, T0) == {
        Dimension.EVALUATIONS: 0,
        D: 1,
        A: 1,
        Dimension.TOKENS: 0,
        Dimension.MICRO_USD: 0,
    }


def test_charge_over_one_cap_refuses_whole_increment(
    budgets: RedisBudgets, scope: BudgetScope
) -> None:
    caps = BudgetCaps(window=MINUTE, deliveries=2, attempts=3)
    for n in range(3):
        assert budgets.charge(scope, caps, {A: 1}, f"a{n}", T0).verdict is BudgetVerdict.OK
    refused = budgets.charge(scope, caps, {D: 1, A: 1}, "both", T0)
    assert (refused.verdict, refused.exhausted) == (BudgetVerdict.EXHAUSTED, A)
    assert budgets.usage(scope, caps, T0)[D] == 0  # deliveries untouched: all or nothing


def test_third_unique_delivery_in_window_of_two_is_exhausted(
    budgets: RedisBudgets, scope: BudgetScope
) -> None:
    caps = BudgetCaps(window=MINUTE, deliveries=2)
    verdicts = [budgets.charge(scope, caps, {D: 1}, f"k{n}", T0).verdict for n in range(3)]
    assert verdicts == [BudgetVerdict.OK, BudgetVerdict.OK, BudgetVerdict.EXHAUSTED]


def test_charge_retried_with_same_token_returns_first_verdict_without_second_increment(
    budgets: RedisBudgets, scope: BudgetScope
) -> None:
    caps = BudgetCaps(window=MINUTE, deliveries=1)
    first = budgets.charge(scope, caps, {D: 1}, "offset:vigil.events:0:7", T0)
    again = budgets.charge(
        scope, caps, {D: 1}, "offset:vigil.events:0:7", T0 + timedelta(seconds=9)
    )
    assert first.verdict is again.verdict is BudgetVerdict.OK
    assert again.remaining == first.remaining
    assert budgets.usage(scope, caps, T0)[D] == 1
    refused = budgets.charge(scope, caps, {D: 1}, "other", T0)
    assert refused.verdict is BudgetVerdict.EXHAUSTED
    # A refused charge retried in its window is refused again (counters only grow there).
    assert budgets.charge(scope, caps, {D: 1}, "other", T0).verdict is BudgetVerdict.EXHAUSTED


def test_refused_charges_leave_nothing_behind(
    budgets: RedisBudgets, client: redis.Redis, scope: BudgetScope
) -> None:
    caps = BudgetCaps(window=MINUTE, deliveries=1)
    assert budgets.charge(scope, caps, {D: 1}, "first", T0).verdict is BudgetVerdict.OK
    key = budgets.window_key(scope, caps, T0)
    before = client.hgetall(key)
    checks = budgets.charge_many(
        [Charge(scope, caps, {D: 1}, f"flood:{n}") for n in range(2_000)], T0
    )
    assert {c.verdict for c in checks} == {BudgetVerdict.EXHAUSTED}
    assert client.hgetall(key) == before  # no token field per refusal: a flood stays flat


def test_concurrent_charges_never_exceed_the_cap(budgets: RedisBudgets, scope: BudgetScope) -> None:
    caps = BudgetCaps(window=MINUTE, attempts=25)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(
            pool.map(lambda n: budgets.charge(scope, caps, {A: 1}, f"c{n}", T0), range(60))
        )
    assert sum(r.verdict is BudgetVerdict.OK for r in results) == 25
    assert budgets.usage(scope, caps, T0)[A] == 25


def test_new_window_starts_from_zero(budgets: RedisBudgets, scope: BudgetScope) -> None:
    caps = BudgetCaps(window=MINUTE, deliveries=1)
    assert budgets.charge(scope, caps, {D: 1}, "x", T0).verdict is BudgetVerdict.OK
    assert budgets.charge(scope, caps, {D: 1}, "y", T0).verdict is BudgetVerdict.EXHAUSTED
    next_window = T0 + MINUTE
    assert budgets.usage(scope, caps, next_window)[D] == 0
    # The same token is a fresh charge in a new window.
    assert budgets.charge(scope, caps, {D: 1}, "y", next_window).verdict is BudgetVerdict.OK


def test_window_key_expires_a_little_after_its_window_ends(
    budgets: RedisBudgets, client: redis.Redis, scope: BudgetScope
) -> None:
    caps = BudgetCaps(window=MINUTE, deliveries=1)
    budgets.charge(scope, caps, {D: 1}, "x", T0)  # 55 s before its window ends
    lives_ms = client.pttl(budgets.window_key(scope, caps, T0))
    assert EXPIRY_GRACE < timedelta(milliseconds=lives_ms) <= EXPIRY_GRACE + timedelta(seconds=55)


def test_budgets_are_per_watcher(budgets: RedisBudgets, scope: BudgetScope) -> None:
    caps = BudgetCaps(window=MINUTE, deliveries=1)
    other = BudgetScope(scope.tenant_id, scope.user_id, "watch-2")
    assert budgets.charge(scope, caps, {D: 1}, "x", T0).verdict is BudgetVerdict.OK
    assert budgets.charge(other, caps, {D: 1}, "x", T0).verdict is BudgetVerdict.OK


def test_amounts_beyond_fourteen_digits_stay_exact(
    budgets: RedisBudgets, scope: BudgetScope
) -> None:
    big = 2**53 - 2
    caps = BudgetCaps(window=MINUTE, micro_usd=big + 1)
    budgets.charge(scope, caps, {Dimension.MICRO_USD: big}, "big", T0)
    again = budgets.charge(scope, caps, {Dimension.MICRO_USD: big}, "big", T0)
    assert again.remaining[Dimension.MICRO_USD] == 1
    assert budgets.usage(scope, caps, T0)[Dimension.MICRO_USD] == big


def test_erase_subject_removes_exactly_that_subjects_keys(
    budgets: RedisBudgets, client: redis.Redis
) -> None:
    caps = BudgetCaps(window=MINUTE, deliveries=5)
    # "ab"/"c" and "a"/"bc" would collide in a naive joined key; prefixes must not.
    erased = [BudgetScope("t", "ab", "w1"), BudgetScope("t", "ab", "w2")]
    kept = [
        BudgetScope("t", "abc", "w1"),
        BudgetScope("t", "a", "bw1"),
        BudgetScope("ta", "b", "w1"),
    ]
    for n, scope in enumerate(erased + kept):
        budgets.charge(scope, caps, {D: 1}, f"e{n}", T0)
        budgets.charge(scope, caps, {D: 1}, f"f{n}", T0 + MINUTE)
    assert budgets.erase_subject("t", "ab") == 5  # four window hashes and the window index
    for scope in erased:
        assert budgets.usage(scope, caps, T0)[D] == 0
    for scope in kept:
        assert budgets.usage(scope, caps, T0)[D] == 1
        assert budgets.usage(scope, caps, T0 + MINUTE)[D] == 1
    assert budgets.erase_subject("t", "ab") == 0


def test_a_subjects_usage_is_read_from_its_window_index_without_a_keyspace_scan(
    budgets: RedisBudgets, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    minute, hour = BudgetCaps(window=MINUTE, deliveries=50), BudgetCaps(window=HOUR, deliveries=50)
    for n in range(3):
        budgets.charge(BudgetScope("t", "idx", f"w{n}"), minute, {D: n + 1}, f"m{n}", T0)
    budgets.charge(BudgetScope("t", "idx", "w-hour"), hour, {D: 7}, "h", T0)
    budgets.charge(BudgetScope("t", "other", "w0"), minute, {D: 9}, "o", T0)

    def no_scan(*_: object, **__: object) -> None:
        raise AssertionError("the keyspace was scanned")

    monkeypatch.setattr(client, "scan_iter", no_scan)
    monkeypatch.setattr(client, "scan", no_scan)
    assert budgets.subject_usage("t", "idx", T0)[D] == 1 + 2 + 3 + 7
    budgets.charge(BudgetScope("t", "idx", "w0"), minute, {D: 4}, "later", T0 + MINUTE)
    assert budgets.subject_usage("t", "idx", T0 + MINUTE)[D] == 4 + 7
    index = client.zrange(budgets.index_key("t", "idx"), 0, -1)
    assert len(index) == 2, "ended windows leave the index as new ones are filed"
    assert 0 < client.pttl(budgets.index_key("t", "idx")) <= (HOUR + EXPIRY_GRACE) // MS


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_redis_down_raises_budget_store_error(scope: BudgetScope) -> None:
    down = redis.Redis(port=_unused_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    budgets = RedisBudgets(down)  # no network at construction
    caps = BudgetCaps(window=MINUTE, deliveries=1)
    with pytest.raises(BudgetStoreError, match="charge"):
        budgets.charge(scope, caps, {D: 1}, "x", T0)
    with pytest.raises(BudgetStoreError):
        budgets.usage(scope, caps, T0)
    with pytest.raises(BudgetStoreError):
        budgets.erase_subject(scope.tenant_id, scope.user_id)
    down.close()


def test_a_batch_over_many_subjects_charges_each_once_wherever_its_slot_lives(
    budgets: RedisBudgets, client: redis.Redis, unique_name: Callable[[str], str]
) -> None:
    caps = BudgetCaps(window=MINUTE, deliveries=1)
    scopes = [BudgetScope("acme", unique_name(f"u{n}"), "w") for n in range(24)]
    batch = [Charge(s, caps, {D: 1}, f"tok-{n}") for n, s in enumerate(scopes)]
    first = budgets.charge_many(batch, T0)
    assert [c.verdict for c in first] == [BudgetVerdict.OK] * len(scopes)
    again = budgets.charge_many(batch, T0)  # the same tokens: nothing charged twice
    assert [c.verdict for c in again] == [BudgetVerdict.OK] * len(scopes)
    fresh = [Charge(s, caps, {D: 1}, f"new-{n}") for n, s in enumerate(scopes)]
    assert {c.verdict for c in budgets.charge_many(fresh, T0)} == {BudgetVerdict.EXHAUSTED}
    for scope in scopes:
        assert budgets.usage(scope, caps, T0)[D] == 1
    if isinstance(client, RedisCluster):  # the subjects' keys spread over the masters
        slots = {key_slot(budgets.window_key(s, caps, T0).encode()) for s in scopes}
        owners = {client.nodes_manager.get_node_from_slot(slot).name for slot in slots}
        assert len(owners) > 1, owners
