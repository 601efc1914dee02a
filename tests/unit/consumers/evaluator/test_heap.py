"""The evaluator's heap policy: views frozen out of full collections, rarer young passes,
and garbage made after the freeze still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from consumers.evaluator import heap

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_settling_raises_the_thresholds_and_later_cycles_are_still_collected() -> None:
    heap.settle_heap()
    assert gc.get_threshold() == heap.GC_THRESHOLDS
    assert heap.GC_THRESHOLDS[0] > 700 and gc.get_freeze_count() > 0
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a cycle made after the freeze: reference counting cannot free it
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None
