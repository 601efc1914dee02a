"""The watcher page's source hints: bounded, newest kept, only well-formed views remembered."""

from __future__ import annotations

import pytest

from pipeline.control.http.console.sources import KnownSources

pytestmark = pytest.mark.unit


def test_the_oldest_hint_goes_first_and_a_seen_one_is_kept_as_newest() -> None:
    known = KnownSources(size=2)
    known.remember("t", "u", {"watcher_id": "w-1", "source_id": "s-1"})
    known.remember("t", "u", {"watcher_id": "w-2", "source_id": "s-2"})
    known.remember("t", "u", {"watcher_id": "w-1", "source_id": "s-moved"})  # seen again
    known.remember("t", "u", {"watcher_id": "w-3", "source_id": "s-3"})
    assert known.get(("t", "u", "w-2")) is None, "the oldest went"
    assert known.get(("t", "u", "w-1")) == "s-moved"
    assert known.get(("t", "u", "w-3")) == "s-3"
    assert known.get(("other", "u", "w-1")) is None, "by subject"


def test_a_view_without_string_ids_is_not_remembered() -> None:
    known = KnownSources()
    known.remember("t", "u", {"watcher_id": "w-1", "source_id": None})
    known.remember("t", "u", {"watcher_id": 7, "source_id": "s"})
    assert known.get(("t", "u", "w-1")) is None and known.get(("t", "u", "7")) is None
