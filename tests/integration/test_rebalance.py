"""Incremental rebalances (KIP-848, server-side range): three members join and leave one at a
time; partition p of both inputs always lands on one member, a member restores exactly the
partition numbers it gains, and every input is counted exactly once throughout."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry

from pipeline.runtime.app import GroupProtocol, StreamApp
from tests.integration.runtime_helpers import create_topics, produce_inputs, read_all
from tests.integration.test_runtime import assert_counts_exact, inputs
from tests.integration.toy_counter import make_app

pytestmark = pytest.mark.integration

PARTITIONS = 6


class _Member:
    """One app on its own thread and metrics registry."""

    def __init__(self, app: StreamApp, metrics_registry: CollectorRegistry) -> None:
        self.app = app
        self.metrics_registry = metrics_registry
        self.stop = threading.Event()
        self.thread = threading.Thread(target=app.run, args=(self.stop,), daemon=True)

    def restored(self) -> float:
        group = {"group": self.app.group_id}
        found = self.metrics_registry.get_sample_value(
            "vigil_runtime_restored_partitions_total", group
        )
        return found or 0.0

    def numbers(self) -> set[int]:
        return {p for _, p in self.app.assignment()}

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "a member did not leave"


@pytest.fixture
def members() -> Iterator[list[_Member]]:
    made: list[_Member] = []
    yield made
    for member in made:
        member.stop.set()
    for member in made:
        member.thread.join(60)


def _settled(members: list[_Member], inputs: list[str]) -> Callable[[], bool]:
    """Every partition of every input held by exactly one member, none idle."""

    def check() -> bool:
        held = [set(m.app.assignment()) for m in members]
        every = {(t, p) for t in inputs for p in range(PARTITIONS)}
        union = set().union(*held)
        return union == every and sum(map(len, held)) == len(every) and all(held)

    return check


def _wait(condition: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("the group did not settle in time")


def _assert_co_partitioned(members: list[_Member], inputs: list[str]) -> None:
    for member in members:
        held = member.app.assignment()
        by_topic = {t: {p for topic, p in held if topic == t} for t in inputs}
        assert by_topic[inputs[0]] == by_topic[inputs[1]], f"misaligned: {held}"


def test_members_joining_and_leaving_keep_co_partitioning_and_restore_only_what_moves(
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    members: list[_Member],
) -> None:
    ins = [unique_name("rb-in-a"), unique_name("rb-in-b")]
    out = unique_name("rb-out")
    create_topics(kafka_bootstrap, PARTITIONS, *ins, out)
    changelog = unique_name("rb-counts")
    create_topics(kafka_bootstrap, PARTITIONS, changelog, compact=True)
    group = unique_name("rb-group")

    def join(name: str) -> _Member:
        registry = CollectorRegistry()
        app = make_app(
            kafka_bootstrap,
            ins,
            out,
            changelog,
            group,
            name,
            metrics_registry=registry,
            group_protocol=GroupProtocol.CONSUMER,
        )
        member = _Member(app, registry)
        members.append(member)
        member.thread.start()
        return member

    sent = inputs(300)
    produce_inputs(kafka_bootstrap, ins[0], PARTITIONS, sent)
    first = join("one")
    _wait(_settled([first], ins))
    assert first.restored() == PARTITIONS

    batch = 1
    live = [first]
    for step in ("two", "three", "-three", "-one"):
        before = {id(m): (m.numbers(), m.restored()) for m in live}
        if step.startswith("-"):
            leaving = next(m for m in live if m.app.instance_id == step[1:])
            leaving.leave()
            live.remove(leaving)
        else:
            live.append(join(step))
        _wait(_settled(live, ins))
        more = inputs(100, start=300 * batch)
        produce_inputs(kafka_bootstrap, ins[batch % 2], PARTITIONS, more)
        sent += more
        batch += 1
        _assert_co_partitioned(live, ins)
        for member in live:
            numbers, restored = before.get(id(member), (set(), 0.0))
            gained = member.numbers() - numbers
            assert member.restored() - restored == len(gained), (
                f"{member.app.instance_id} after {step}: restored "
                f"{member.restored() - restored} partitions, gained {sorted(gained)}"
            )

    _wait(lambda: len(read_all(kafka_bootstrap, out, max_s=10)) >= len(sent), seconds=90)
    for member in live:
        member.leave()
    assert_counts_exact(read_all(kafka_bootstrap, out), sent)
