"""The run mark of test names: the end-of-session cleanup deletes exactly this process's topics."""

from __future__ import annotations

import pytest

from tests.names import RUN, fresh, ours

pytestmark = [pytest.mark.unit]


def test_fresh_names_are_distinct_and_carry_this_runs_mark() -> None:
    a, b = fresh("t-cmd"), fresh("t-cmd")
    assert a != b and a.startswith("t-cmd-") and ours(a + ".events") and ours(b + ".outbox")


def test_names_of_another_run_or_of_a_deployment_are_not_ours() -> None:
    other = format(int(RUN, 16) ^ 1, f"0{len(RUN)}x")  # differs from RUN in its last digit
    assert not ours(f"t-cmd-{other}-3.events")
    assert not ours("vigil.events") and not ours(f"vigil{RUN}.events")
