"""The receipt privacy filter: scalar leaves at allowlisted paths, nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.rules.errors import DefinitionError
from pipeline.rules.paths import MISSING, parse_path, resolve
from pipeline.rules.privacy import filter_payload, parse_retain_paths

pytestmark = pytest.mark.unit

PAYLOAD: dict[str, Any] = {
    "status": "failed",
    "branch": "release/1.2",
    "secret": "s3cr3t",
    "n": 1.5,
    "ok": False,
    "gone": None,
    "tags": ["a", {"x": 1}],
    "commit": {"sha": "abc", "author": {"email": "a@example.com", "name": "A"}},
}


def test_filter_keeps_listed_scalar_leaves_and_rebuilds_nesting() -> None:
    kept = filter_payload(PAYLOAD, ["status", "commit.sha", "commit.author.name", "n", "ok"])
    assert kept == {
        "status": "failed",
        "n": 1.5,
        "ok": False,
        "commit": {"sha": "abc", "author": {"name": "A"}},
    }


def test_filter_with_listed_parent_keeps_none_of_its_unlisted_children() -> None:
    assert filter_payload(PAYLOAD, ["commit"]) == {}
    assert filter_payload(PAYLOAD, ["commit", "commit.author"]) == {}
    assert filter_payload(PAYLOAD, ["commit", "commit.sha"]) == {"commit": {"sha": "abc"}}


def test_filter_never_keeps_or_descends_lists() -> None:
    assert filter_payload(PAYLOAD, ["tags", "tags.x"]) == {}


def test_filter_keeps_null_leaf_and_skips_missing_paths() -> None:
    assert filter_payload(PAYLOAD, ["gone", "absent", "status.deeper"]) == {"gone": None}


def test_filter_with_empty_allowlist_keeps_nothing() -> None:
    assert filter_payload(PAYLOAD, []) == {}


def test_filter_returns_new_structure_without_touching_payload() -> None:
    before = repr(PAYLOAD)
    kept = filter_payload(PAYLOAD, ["commit.sha"])
    kept["commit"]["sha"] = "changed"
    assert repr(PAYLOAD) == before


@pytest.mark.parametrize("bad", ["a..b", "", "1x", "a.b-c", "tags[0]", "a.*", "ä"])
def test_filter_with_invalid_path_raises_naming_the_entry(bad: str) -> None:
    with pytest.raises(DefinitionError) as info:
        filter_payload(PAYLOAD, ["status", bad])
    assert info.value.field == "privacy.retain_paths[1]"


def test_parse_retain_paths_splits_and_names_field() -> None:
    assert parse_retain_paths(["a.b", "c"]) == (("a", "b"), ("c",))
    with pytest.raises(DefinitionError) as info:
        parse_retain_paths([3], "receipt.retain")  # type: ignore[list-item]
    assert info.value.field == "receipt.retain[0]"


_KEYS = st.sampled_from(["a", "b", "c"])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12,
)
_PATHS = st.lists(_KEYS, min_size=1, max_size=3).map(".".join)


def _leaves(value: Any, prefix: str = "") -> set[str]:
    if not isinstance(value, dict):
        return {prefix}
    return set().union(*(_leaves(v, f"{prefix}.{k}" if prefix else k) for k, v in value.items()))


@given(payload=st.dictionaries(_KEYS, _JSON, max_size=3), paths=st.lists(_PATHS, max_size=5))
def test_filter_output_is_exactly_the_listed_scalar_leaves(
    payload: dict[str, Any], paths: list[str]
) -> None:
    kept = filter_payload(payload, paths)
    expected = {
        p
        for p in paths
        if (v := resolve(payload, parse_path(p, "p"))) is not MISSING
        and isinstance(v, str | int | float | bool | type(None))
    }
    assert (_leaves(kept) if kept else set()) == expected
    for path in expected:
        assert resolve(kept, parse_path(path, "p")) == resolve(payload, parse_path(path, "p"))
