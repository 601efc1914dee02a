"""``list`` one page at a time (the console's server-side pagination): filters by state, session
and source, ``offset``/``limit`` by id, and a total that counts every match — pure."""

from __future__ import annotations

import pytest

from pipeline.rules.authz import Action
from pipeline.rules.commands import CommandVerb
from tests.unit.rules.commands.test_apply import Subject, definition, grant_record

pytestmark = pytest.mark.unit


def _subject(count: int) -> Subject:
    subject = Subject(grants={"g-1": grant_record(Action.MANAGE)})
    for n in range(count):
        source = "ci.other" if n % 3 == 0 else "ci.pipeline"
        subject.ok(CommandVerb.CREATE, definition=definition(f"w-{n:02d}", source_id=source))
    return subject


def test_a_page_holds_limit_watchers_by_id_and_the_total_counts_every_match() -> None:
    subject = _subject(12)
    page = subject.ok(CommandVerb.LIST, offset=5, limit=4)
    assert [w["watcher_id"] for w in page["watchers"]] == ["w-05", "w-06", "w-07", "w-08"]
    assert page["total"] == 12
    last = subject.ok(CommandVerb.LIST, offset=10, limit=4)
    assert [w["watcher_id"] for w in last["watchers"]] == ["w-10", "w-11"]
    counted = subject.ok(CommandVerb.LIST, limit=0)
    assert counted == {"watchers": [], "total": 12}
    assert "total" not in subject.ok(CommandVerb.LIST), "without a page: every watcher, as before"


def test_the_source_filter_is_exact_and_applies_before_the_page() -> None:
    subject = _subject(12)
    page = subject.ok(CommandVerb.LIST, source_id="ci.other", limit=2)
    assert [w["watcher_id"] for w in page["watchers"]] == ["w-00", "w-03"]
    assert page["total"] == 4
    assert subject.ok(CommandVerb.LIST, source_id="nope", limit=5) == {"watchers": [], "total": 0}


def test_a_page_bound_outside_its_range_is_refused_before_anything_is_decided() -> None:
    subject = _subject(1)
    with pytest.raises(ValueError, match="less than or equal to 10000"):
        subject.run(CommandVerb.LIST, limit=10_001)
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        subject.run(CommandVerb.LIST, offset=-1)
