"""Export and import: the export file's parser is total and bounded (any bytes: a file or a
named refusal), an exported watcher is restored exactly, conflicts are refused as ``create``
refuses them, and only operators export or import."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rules.authz import Principal
from pipeline.rules.commands import CommandVerb, ResultCode, watcher_view
from pipeline.rules.commands.transfer import EXPORT_FORMAT, MAX_FILE_BYTES, parse_export
from pipeline.rules.errors import DefinitionError
from tests.unit.rules.commands.test_apply import (
    GRANTS,
    OPERATOR,
    OWNER,
    Subject,
    agent,
    agent_watch,
    definition,
)

pytestmark = pytest.mark.unit

TENANT = "acme"


def _exported() -> tuple[Subject, dict[str, Any]]:
    subject = Subject()
    subject.ok(CommandVerb.CREATE, definition=definition("w-1"))
    subject.ok(CommandVerb.PAUSE, watcher_id="w-1", expected_revision=1)
    subject.ok(CommandVerb.PROPOSE, agent(), definition=agent_watch("aw-1"))
    page = subject.ok(CommandVerb.EXPORT, OPERATOR)
    return subject, page


def _file(page: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in page.items() if k != "total"})


def test_an_export_parses_back_to_the_same_watchers_and_imports_them_exactly() -> None:
    source, page = _exported()
    assert page["format"] == EXPORT_FORMAT and page["total"] == 2
    exported = parse_export(_file(page))
    assert [watcher_view(w) for w in exported.watchers] == page["watchers"]
    target = Subject()
    for view in page["watchers"]:
        target.ok(CommandVerb.IMPORT, OPERATOR, watcher_id=view["watcher_id"], definition=view)
    assert target.view == source.view


def test_an_import_over_a_live_watcher_or_a_later_version_is_a_conflict() -> None:
    source, page = _exported()
    for view in page["watchers"]:
        code, field = source.refused(CommandVerb.IMPORT, OPERATOR, definition=view)
        assert (code, field) == (ResultCode.CONFLICT, "watcher_id")


def test_a_live_import_needs_a_grant_and_room_like_create() -> None:
    _, page = _exported()
    bare = Subject(grants={})
    code, _ = bare.refused(CommandVerb.IMPORT, OPERATOR, definition=page["watchers"][1])
    assert code is ResultCode.DENIED


@pytest.mark.parametrize("who", [OWNER, agent()], ids=["owner", "agent"])
def test_only_operators_export_or_import(who: Principal) -> None:
    _, page = _exported()
    subject = Subject(dict(GRANTS))
    assert subject.refused(CommandVerb.EXPORT, who)[0] is ResultCode.DENIED
    view = page["watchers"][0]
    assert subject.refused(CommandVerb.IMPORT, who, definition=view)[0] is ResultCode.DENIED


def _mutated(change: dict[str, Any], where: str = "watcher") -> str:
    _, page = _exported()
    if where == "file":
        page.update(change)
    else:
        page["watchers"][0].update(change)
    return _file(page)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[" * 10_000, "file"),
        ("{}", "file"),
        ("null", "file"),
        (_mutated({"format": "vigil.export.v9"}, "file"), "format"),
        (_mutated({"watchers": {}}, "file"), "watchers"),
        (_mutated({"tenant_id": "globex"}), "watchers[0].tenant_id"),
        (_mutated({"version": 0}), "watchers[0].version"),
        (_mutated({"version": True}), "watchers[0].version"),
        (_mutated({"revision": 2**70}), "file"),
        (_mutated({"status": "zombie"}), "watchers[0].status"),
        (_mutated({"closed_reason": "bored"}), "watchers[0].closed_reason"),
        (_mutated({"created_at": "yesterday"}), "watchers[0].created_at"),
        (_mutated({"source_id": "elsewhere"}), "watchers[0].source_id"),
        (_mutated({"extra": 1}), "watchers[0]"),
        (_mutated({"definition": "not an object"}), "watchers[0].definition"),
        (_mutated({"definition": {"version": 9}}), "watchers[0].definition"),
    ],
    ids=lambda v: str(v)[:40],
)
def test_a_hostile_file_is_a_named_refusal(text: str, field: str) -> None:
    with pytest.raises(DefinitionError) as refused:
        parse_export(text)
    assert refused.value.field == field


def test_a_secret_in_an_exported_definition_is_refused() -> None:
    _, page = _exported()
    page["watchers"][0]["definition"]["delivery"]["target"] = "https://hooks.example/T0/xoxb-1"
    with pytest.raises(DefinitionError):
        parse_export(_file(page))


def test_a_file_over_the_bound_is_refused_before_parsing() -> None:
    with pytest.raises(DefinitionError, match="larger than"):
        parse_export(b" " * (MAX_FILE_BYTES + 1))


def test_a_watcher_listed_twice_is_refused() -> None:
    _, page = _exported()
    page["watchers"].append(page["watchers"][0])
    with pytest.raises(DefinitionError, match="twice"):
        parse_export(_file(page))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300)
@given(st.binary(max_size=400) | _JSON.map(json.dumps))
def test_any_bytes_parse_or_are_refused_by_name(data: str | bytes) -> None:
    with contextlib.suppress(DefinitionError):
        parse_export(data)


_PAGE = _exported()[1]


@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from(sorted(_PAGE["watchers"][0])), _JSON, max_size=3))
def test_any_watcher_object_imports_or_is_refused_by_name(changes: dict[str, Any]) -> None:
    view = {**_PAGE["watchers"][0], **changes}
    outcome = Subject().run(CommandVerb.IMPORT, OPERATOR, definition=view)
    assert outcome.result.ok or outcome.result.error is not None
